//! Parsing the attribute's arguments: `key = "value"` pairs (`name`, `ttl`,
//! `wait`, `manager`, `max_hold`, `on_lost`, `at_least`, `contended`,
//! `crate`) and bare flags (`renew`, `fenced`, `shared`).
//!
//! Parsing only checks the shape of each pair or flag and keeps the string
//! literals and flag idents (for their spans); what the values mean is checked in
//! [`validate`](crate::validate). Every problem is collected, so one compile
//! reports all of them.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::Parser;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

use crate::Errors;

/// Every key the attribute takes, in the order the docs list them.
pub(crate) const KEYS: &[&str] = &[
    "name",
    "ttl",
    "wait",
    "manager",
    "renew",
    "max_hold",
    "on_lost",
    "at_least",
    "fenced",
    "shared",
    "contended",
    "crate",
];

/// The keys that are flags: written bare, with no value.
const FLAGS: &[&str] = &["renew", "fenced", "shared"];

/// The attribute's arguments as written.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) name: Option<LitStr>,
    pub(crate) ttl: Option<LitStr>,
    pub(crate) wait: Option<LitStr>,
    pub(crate) manager: Option<LitStr>,
    pub(crate) renew: Option<Ident>,
    pub(crate) max_hold: Option<LitStr>,
    pub(crate) on_lost: Option<LitStr>,
    pub(crate) at_least: Option<LitStr>,
    pub(crate) fenced: Option<Ident>,
    pub(crate) shared: Option<Ident>,
    pub(crate) contended: Option<LitStr>,
    pub(crate) krate: Option<LitStr>,
    /// Keys that were written, even with a bad value or misspelt (as the key
    /// they were closest to), so a wrong `ttl` is not also reported missing.
    pub(crate) written: Vec<&'static str>,
}

impl Args {
    /// Parses `tokens`, recording every problem in `errors`; keys that could
    /// not be read are left unset.
    pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Args {
        let mut args = Args::default();
        if tokens.is_empty() {
            return args;
        }
        let parser = syn::meta::parser(|meta| {
            let Some(key) = meta.path.get_ident().cloned() else {
                errors.push(syn::Error::new_spanned(
                    &meta.path,
                    format!("unknown key: #[locked] takes {}", key_list()),
                ));
                skip_value(&meta)?;
                return Ok(());
            };
            let key_name = key.to_string();
            let Some(known) = KEYS.iter().copied().find(|known| *known == key_name) else {
                args.written.extend(closest_key(&key_name));
                errors.push(unknown_key(&key));
                skip_value(&meta)?;
                return Ok(());
            };
            args.written.push(known);
            if FLAGS.contains(&known) {
                if !flag(&meta, &key, errors)? {
                    return Ok(());
                }
                let slot = match known {
                    "renew" => &mut args.renew,
                    "fenced" => &mut args.fenced,
                    _ => &mut args.shared,
                };
                set_once(slot, &key, key.clone(), errors);
                return Ok(());
            }
            let Some(value) = string_value(&meta, &key, errors)? else {
                return Ok(());
            };
            let slot = match known {
                "name" => &mut args.name,
                "ttl" => &mut args.ttl,
                "wait" => &mut args.wait,
                "manager" => &mut args.manager,
                "max_hold" => &mut args.max_hold,
                "on_lost" => &mut args.on_lost,
                "at_least" => &mut args.at_least,
                "contended" => &mut args.contended,
                _ => &mut args.krate,
            };
            set_once(slot, &key, value, errors);
            Ok(())
        });
        if let Err(error) = parser.parse2(tokens) {
            errors.push(error);
        }
        args
    }
}

/// Stores `value` in `slot` unless the key was given already.
fn set_once<T>(slot: &mut Option<T>, key: &Ident, value: T, errors: &mut Errors) {
    if slot.is_some() {
        errors.push(syn::Error::new(
            key.span(),
            format!("`{key}` is given twice: keep one of them"),
        ));
    } else {
        *slot = Some(value);
    }
}

/// Checks that a flag is written bare. `Ok(false)` (with the problem
/// recorded) when a value follows it; `Err` only when the input is too
/// malformed to go on.
fn flag(
    meta: &syn::meta::ParseNestedMeta<'_>,
    key: &Ident,
    errors: &mut Errors,
) -> syn::Result<bool> {
    let value: TokenStream = if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?.into_token_stream()
    } else if meta.input.peek(syn::token::Paren) {
        meta.input
            .parse::<proc_macro2::Group>()?
            .into_token_stream()
    } else {
        return Ok(true);
    };
    errors.push(syn::Error::new_spanned(
        value,
        format!(
            "`{key}` is a flag and takes no value: write `{key}` alone to turn it on, or leave it out to keep it off"
        ),
    ));
    Ok(false)
}

/// Reads `= "string"` after a key. `Ok(None)` (with the problem recorded)
/// when the value is missing or not a string; `Err` only when the input is
/// too malformed to go on.
fn string_value(
    meta: &syn::meta::ParseNestedMeta<'_>,
    key: &Ident,
    errors: &mut Errors,
) -> syn::Result<Option<LitStr>> {
    if !meta.input.peek(Token![=]) {
        errors.push(syn::Error::new(
            key.span(),
            format!("`{key}` needs a value: write `{key} = {}`", example(key)),
        ));
        skip_value(meta)?;
        return Ok(None);
    }
    let value: Expr = meta.value()?.parse()?;
    if let Expr::Lit(ExprLit {
        lit: Lit::Str(text),
        ..
    }) = value
    {
        return Ok(Some(text));
    }
    let hint = match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(number),
            ..
        }) if matches!(
            key.to_string().as_str(),
            "ttl" | "wait" | "max_hold" | "at_least"
        ) =>
        {
            format!("`{key} = \"{}s\"` for seconds", number.base10_digits())
        }
        Expr::Path(path) if matches!(key.to_string().as_str(), "on_lost" | "contended") => {
            match path.path.get_ident() {
                Some(word) => format!("`{key} = \"{word}\"`"),
                None => format!("`{key} = {}`", example(key)),
            }
        }
        _ => format!("`{key} = {}`", example(key)),
    };
    errors.push(syn::Error::new_spanned(
        value,
        format!("`{key}` takes a string literal: write {hint}"),
    ));
    Ok(None)
}

/// Consumes whatever follows a key that is being reported, so parsing can go
/// on to the next key.
fn skip_value(meta: &syn::meta::ParseNestedMeta<'_>) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        meta.input.parse::<proc_macro2::Group>()?;
    }
    Ok(())
}

fn example(key: &Ident) -> &'static str {
    match key.to_string().as_str() {
        "name" => "\"reports:{tenant}\"",
        "ttl" => "\"30s\"",
        "wait" => "\"2s\"",
        "manager" => "\"billing\"",
        "max_hold" => "\"1h\"",
        "on_lost" => "\"cancel\"",
        "at_least" => "\"1m\"",
        "contended" => "\"error\"",
        _ => "\"my_lock_core\"",
    }
}

fn key_list() -> String {
    let quoted: Vec<String> = KEYS.iter().map(|key| format!("`{key}`")).collect();
    quoted.join(", ")
}

fn unknown_key(key: &Ident) -> syn::Error {
    let written = key.to_string();
    let message = match closest_key(&written) {
        Some(meant) => format!(
            "unknown key `{written}`: did you mean `{meant}`? #[locked] takes {}",
            key_list()
        ),
        None => format!("unknown key `{written}`: #[locked] takes {}", key_list()),
    };
    syn::Error::new(key.span(), message)
}

/// The known key closest to `written`, if it is close enough to be a typo.
pub(crate) fn closest_key(written: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|key| (edit_distance(written, key), *key))
        .filter(|(distance, key)| *distance <= 2 && *distance < key.len())
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, key)| key)
}

/// Levenshtein distance, with a swap of two neighbours counted as one edit
/// (`tll` for `ttl` is one slip, not two).
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let mut table = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in table.iter_mut().enumerate() {
        row[0] = i;
    }
    for (j, cell) in table[0].iter_mut().enumerate() {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (table[i - 1][j] + 1)
                .min(table[i][j - 1] + 1)
                .min(table[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(table[i - 2][j - 2] + 1);
            }
            table[i][j] = best;
        }
    }
    table[a.len()][b.len()]
}

/// The span errors about the attribute as a whole point at.
pub(crate) fn attribute_span() -> Span {
    Span::call_site()
}

#[cfg(test)]
mod tests {
    use super::*;
    use quote::quote;

    fn parse(tokens: TokenStream) -> (Args, Vec<String>) {
        let mut errors = Errors::default();
        let args = Args::parse(tokens, &mut errors);
        (args, errors.messages())
    }

    // The happy path: every key lands in its own slot with its text intact.
    #[test]
    fn every_key_is_read_into_its_slot() {
        let (args, errors) = parse(quote!(
            name = "a:{b}",
            ttl = "10m",
            wait = "2s",
            manager = "m",
            crate = "x"
        ));
        assert!(errors.is_empty(), "no errors expected: {errors:?}");
        let value = |slot: &Option<LitStr>| slot.as_ref().map(LitStr::value);
        assert_eq!(value(&args.name).as_deref(), Some("a:{b}"), "name");
        assert_eq!(value(&args.ttl).as_deref(), Some("10m"), "ttl");
        assert_eq!(value(&args.wait).as_deref(), Some("2s"), "wait");
        assert_eq!(value(&args.manager).as_deref(), Some("m"), "manager");
        assert_eq!(value(&args.krate).as_deref(), Some("x"), "crate");
    }

    // One compile must report every mistake, not the first one only.
    #[test]
    fn every_mistake_in_one_attribute_is_reported() {
        let (args, errors) = parse(quote!(tll = "1s", ttl = 10, wait, name = "a", name = "b"));
        assert_eq!(errors.len(), 4, "four mistakes, four errors: {errors:?}");
        assert!(errors[0].contains("did you mean `ttl`"), "{}", errors[0]);
        assert!(errors[1].contains("`ttl = \"10s\"`"), "{}", errors[1]);
        assert!(errors[2].contains("`wait` needs a value"), "{}", errors[2]);
        assert!(errors[3].contains("`name` is given twice"), "{}", errors[3]);
        assert_eq!(
            args.name.map(|name| name.value()).as_deref(),
            Some("a"),
            "the first of a duplicated key is kept"
        );
    }

    // The suggestion must name the intended key for common slips, and stay
    // quiet when nothing is close, rather than suggest nonsense.
    #[test]
    fn a_typo_in_a_key_suggests_the_nearest_key() {
        assert_eq!(closest_key("tll"), Some("ttl"), "swapped letters");
        assert_eq!(closest_key("nmae"), Some("name"), "swap in name");
        assert_eq!(closest_key("wiat"), Some("wait"), "swap in wait");
        assert_eq!(closest_key("manger"), Some("manager"), "missing letter");
        assert_eq!(closest_key("crates"), Some("crate"), "extra letter");
        assert_eq!(closest_key("timeout"), None, "nothing close");
    }

    // Flags are bare words; value keys land in their slots like the others.
    #[test]
    fn flags_and_lease_option_keys_are_read_into_their_slots() {
        let (args, errors) = parse(quote!(
            ttl = "1m",
            renew,
            max_hold = "1h",
            on_lost = "cancel",
            at_least = "30s",
            fenced,
            shared,
            contended = "error"
        ));
        assert!(errors.is_empty(), "no errors expected: {errors:?}");
        let value = |slot: &Option<LitStr>| slot.as_ref().map(LitStr::value);
        assert!(args.renew.is_some(), "renew");
        assert!(args.fenced.is_some(), "fenced");
        assert!(args.shared.is_some(), "shared");
        assert_eq!(value(&args.max_hold).as_deref(), Some("1h"), "max_hold");
        assert_eq!(value(&args.on_lost).as_deref(), Some("cancel"), "on_lost");
        assert_eq!(value(&args.at_least).as_deref(), Some("30s"), "at_least");
        assert_eq!(
            value(&args.contended).as_deref(),
            Some("error"),
            "contended"
        );
    }

    // `renew = true` reads naturally but is wrong: the message must say a
    // flag is written alone, and a bare value key must say it needs a value.
    #[test]
    fn a_flag_with_a_value_and_a_value_key_without_one_say_how_to_write_them() {
        let (args, errors) = parse(quote!(
            ttl = "1m",
            renew = true,
            fenced(),
            max_hold,
            on_lost = cancel,
            shared,
            shared
        ));
        assert_eq!(errors.len(), 5, "five mistakes: {errors:?}");
        assert!(
            errors[0].contains("`renew` is a flag and takes no value: write `renew` alone"),
            "{}",
            errors[0]
        );
        assert!(errors[1].contains("`fenced` is a flag"), "{}", errors[1]);
        assert!(
            errors[2].contains("`max_hold` needs a value: write `max_hold = \"1h\"`"),
            "{}",
            errors[2]
        );
        assert!(
            errors[3].contains("write `on_lost = \"cancel\"`"),
            "an unquoted word is answered with the quoted word: {}",
            errors[3]
        );
        assert!(
            errors[4].contains("`shared` is given twice"),
            "{}",
            errors[4]
        );
        assert!(args.renew.is_none(), "a flag with a value is not set");
        assert!(
            args.shared.is_some(),
            "the first of a duplicated flag is kept"
        );
    }

    // The new keys must be suggested for their likely slips too.
    #[test]
    fn a_typo_in_a_lease_option_suggests_it() {
        assert_eq!(closest_key("renwe"), Some("renew"), "swap in renew");
        assert_eq!(closest_key("fence"), Some("fenced"), "fence");
        assert_eq!(closest_key("maxhold"), Some("max_hold"), "no underscore");
        assert_eq!(closest_key("atleast"), Some("at_least"), "no underscore");
        assert_eq!(closest_key("onlost"), Some("on_lost"), "no underscore");
        assert_eq!(closest_key("shard"), Some("shared"), "missing letter");
    }
}
