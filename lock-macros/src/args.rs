//! Parsing the attribute's arguments against the key table.
//!
//! Reads `key = "value"` pairs, bare flags and integer literals, each
//! against its row of [`KEYS`], and keeps the string literals and flag
//! idents (for their spans); what the values mean is checked in
//! [`validate`](crate::validate). Every problem is collected, so one
//! compile reports all of them.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::Parser;
use syn::{Expr, ExprLit, Ident, Lit, LitInt, LitStr, Token};

use crate::Errors;
use crate::keys::{KEYS, Key, Kind};

/// A value as written: a string literal, a flag's ident, or an integer.
pub(crate) enum Value {
    Text(LitStr),
    Flag(Ident),
    Count(LitInt),
}

/// The attribute's arguments as written, each against its table row.
#[derive(Default)]
pub(crate) struct Args {
    values: Vec<(&'static Key, Value)>,
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
            let Some(ident) = meta.path.get_ident().cloned() else {
                errors.push(syn::Error::new_spanned(
                    &meta.path,
                    format!("unknown key: #[locked] takes {}", key_list()),
                ));
                skip_value(&meta)?;
                return Ok(());
            };
            let written = ident.to_string();
            let Some(key) = KEYS.iter().find(|key| key.name == written) else {
                args.written.extend(closest_key(&written));
                errors.push(unknown_key(&ident));
                skip_value(&meta)?;
                return Ok(());
            };
            args.written.push(key.name);
            let value = match key.kind {
                Kind::Flag => {
                    if !flag(&meta, &ident, errors)? {
                        return Ok(());
                    }
                    Value::Flag(ident.clone())
                }
                Kind::Count => match count_value(&meta, key, &ident, errors)? {
                    Some(count) => Value::Count(count),
                    None => return Ok(()),
                },
                _ => match string_value(&meta, key, &ident, errors)? {
                    Some(text) => Value::Text(text),
                    None => return Ok(()),
                },
            };
            if args.values.iter().any(|(given, _)| given.name == key.name) {
                errors.push(syn::Error::new(
                    ident.span(),
                    format!("`{ident}` is given twice: keep one of them"),
                ));
            } else {
                args.values.push((key, value));
            }
            Ok(())
        });
        if let Err(error) = parser.parse2(tokens) {
            errors.push(error);
        }
        args
    }

    /// The string given for the key `name`, if any.
    pub(crate) fn text(&self, name: &str) -> Option<&LitStr> {
        self.values.iter().find_map(|(key, value)| match value {
            Value::Text(text) if key.name == name => Some(text),
            _ => None,
        })
    }

    /// The flag `name`, if written.
    pub(crate) fn flag(&self, name: &str) -> Option<&Ident> {
        self.values.iter().find_map(|(key, value)| match value {
            Value::Flag(ident) if key.name == name => Some(ident),
            _ => None,
        })
    }

    /// The count given for the key `name`, if any.
    pub(crate) fn count(&self, name: &str) -> Option<&LitInt> {
        self.values.iter().find_map(|(key, value)| match value {
            Value::Count(count) if key.name == name => Some(count),
            _ => None,
        })
    }

    /// Every key given, in the order written, with its value.
    pub(crate) fn given(&self) -> impl Iterator<Item = &(&'static Key, Value)> {
        self.values.iter()
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

/// The expression after `key =`, or `Ok(None)` (with the problem recorded,
/// and whatever follows skipped) when there is no `=`.
fn value_after(
    meta: &syn::meta::ParseNestedMeta<'_>,
    row: &Key,
    key: &Ident,
    errors: &mut Errors,
) -> syn::Result<Option<Expr>> {
    if !meta.input.peek(Token![=]) {
        errors.push(syn::Error::new(
            key.span(),
            format!("`{key}` needs a value: write `{key} = {}`", row.example),
        ));
        skip_value(meta)?;
        return Ok(None);
    }
    Ok(Some(meta.value()?.parse()?))
}

/// Reads `= "string"` after a key. `Ok(None)` (with the problem recorded)
/// when the value is missing or not a string; `Err` only when the input is
/// too malformed to go on.
fn string_value(
    meta: &syn::meta::ParseNestedMeta<'_>,
    row: &Key,
    key: &Ident,
    errors: &mut Errors,
) -> syn::Result<Option<LitStr>> {
    let Some(value) = value_after(meta, row, key, errors)? else {
        return Ok(None);
    };
    if let Expr::Lit(ExprLit {
        lit: Lit::Str(text),
        ..
    }) = value
    {
        return Ok(Some(text));
    }
    let hint = match (&value, &row.kind) {
        (
            Expr::Lit(ExprLit {
                lit: Lit::Int(number),
                ..
            }),
            Kind::Duration { .. },
        ) => format!("`{key} = \"{}s\"` for seconds", number.base10_digits()),
        (Expr::Path(path), Kind::Choice(_)) => match path.path.get_ident() {
            Some(word) => format!("`{key} = \"{word}\"`"),
            None => format!("`{key} = {}`", row.example),
        },
        _ => format!("`{key} = {}`", row.example),
    };
    errors.push(syn::Error::new_spanned(
        value,
        format!("`{key}` takes a string literal: write {hint}"),
    ));
    Ok(None)
}

/// Reads `= 4` after a key. `Ok(None)` (with the problem recorded) when the
/// value is missing or not an integer literal; `Err` only when the input is
/// too malformed to go on.
fn count_value(
    meta: &syn::meta::ParseNestedMeta<'_>,
    row: &Key,
    key: &Ident,
    errors: &mut Errors,
) -> syn::Result<Option<LitInt>> {
    let Some(value) = value_after(meta, row, key, errors)? else {
        return Ok(None);
    };
    let hint = match &value {
        Expr::Lit(ExprLit {
            lit: Lit::Int(count),
            ..
        }) => return Ok(Some(count.clone())),
        Expr::Lit(ExprLit {
            lit: Lit::Str(text),
            ..
        }) => match text.value().trim().parse::<u64>() {
            Ok(count) => format!("write `{key} = {count}`, without quotes"),
            Err(_) => format!("write `{key} = {}`", row.example),
        },
        _ => format!(
            "write the number itself, like `{key} = {}` (a constant or expression cannot be read at compile time)",
            row.example
        ),
    };
    errors.push(syn::Error::new_spanned(
        value,
        format!("`{key}` takes a positive integer literal: {hint}"),
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

fn key_list() -> String {
    let quoted: Vec<String> = KEYS.iter().map(|key| format!("`{}`", key.name)).collect();
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
        .map(|key| (edit_distance(written, key.name), key.name))
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
        let value = |name: &str| args.text(name).map(LitStr::value);
        assert_eq!(value("name").as_deref(), Some("a:{b}"), "name");
        assert_eq!(value("ttl").as_deref(), Some("10m"), "ttl");
        assert_eq!(value("wait").as_deref(), Some("2s"), "wait");
        assert_eq!(value("manager").as_deref(), Some("m"), "manager");
        assert_eq!(value("crate").as_deref(), Some("x"), "crate");
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
            args.text("name").map(LitStr::value).as_deref(),
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
            contended = "error",
            read
        ));
        assert!(errors.is_empty(), "no errors expected: {errors:?}");
        let value = |name: &str| args.text(name).map(LitStr::value);
        assert!(args.flag("read").is_some(), "read");
        assert!(args.flag("renew").is_some(), "renew");
        assert!(args.flag("fenced").is_some(), "fenced");
        assert!(args.flag("shared").is_some(), "shared");
        assert_eq!(value("max_hold").as_deref(), Some("1h"), "max_hold");
        assert_eq!(value("on_lost").as_deref(), Some("cancel"), "on_lost");
        assert_eq!(value("at_least").as_deref(), Some("30s"), "at_least");
        assert_eq!(value("contended").as_deref(), Some("error"), "contended");
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
        assert!(
            args.flag("renew").is_none(),
            "a flag with a value is not set"
        );
        assert!(
            args.flag("shared").is_some(),
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
        assert_eq!(closest_key("raed"), Some("read"), "swap in read");
    }
}
