//! Parsing the attribute's arguments: `name = "..", ttl = "..", wait = "..",
//! manager = "..", crate = ".."`.
//!
//! Parsing only checks the shape of each `key = "value"` pair and keeps the
//! string literals (for their spans); what the values mean is checked in
//! [`validate`](crate::validate). Every problem is collected, so one compile
//! reports all of them.

use proc_macro2::{Span, TokenStream};
use syn::parse::Parser;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Token};

use crate::Errors;

/// Every key the attribute takes, in the order the docs list them.
pub(crate) const KEYS: &[&str] = &["name", "ttl", "wait", "manager", "crate"];

/// The attribute's arguments as written.
#[derive(Default)]
pub(crate) struct Args {
    pub(crate) name: Option<LitStr>,
    pub(crate) ttl: Option<LitStr>,
    pub(crate) wait: Option<LitStr>,
    pub(crate) manager: Option<LitStr>,
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
            let Some(value) = string_value(&meta, &key, errors)? else {
                return Ok(());
            };
            let slot = match key_name.as_str() {
                "name" => &mut args.name,
                "ttl" => &mut args.ttl,
                "wait" => &mut args.wait,
                "manager" => &mut args.manager,
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
fn set_once(slot: &mut Option<LitStr>, key: &Ident, value: LitStr, errors: &mut Errors) {
    if slot.is_some() {
        errors.push(syn::Error::new(
            key.span(),
            format!("`{key}` is given twice: keep one of them"),
        ));
    } else {
        *slot = Some(value);
    }
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
        }) if matches!(key.to_string().as_str(), "ttl" | "wait") => {
            format!("`{key} = \"{}s\"` for seconds", number.base10_digits())
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
}
