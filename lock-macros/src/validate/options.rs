//! The lease options: each `lock_core::LockOptions` field the attribute
//! set, checked by its kind in the key table, then against the others
//! (`max_hold` needs `renew`, `at_least` must fit in `ttl`, `fenced` goes
//! with one permit only, `read` with neither `permits` nor `fenced`).

use std::time::Duration;

use syn::{Ident, LitStr};

use super::checked_duration;
use crate::Errors;
use crate::args::{Args, Value};
use crate::keys::{Choice, Kind};

/// One option's value, checked.
pub(crate) enum Checked {
    /// A flag, written: on.
    On,
    /// A duration.
    Duration(Duration),
    /// One of the key's words, with the literal for spans.
    Choice(&'static Choice, LitStr),
    /// A positive count.
    Count(u32),
}

/// The `LockOptions` fields the attribute set, each checked by its kind,
/// then against each other: `max_hold` needs `renew`, `at_least` must fit in
/// `ttl` (when `ttl` itself is valid, so nothing is compared with a
/// placeholder), `read` goes with neither `permits` nor `fenced`.
pub(super) fn options(
    args: &Args,
    ttl: Option<Duration>,
    errors: &mut Errors,
) -> Vec<(&'static str, Checked)> {
    let renew = args.flag("renew").is_some();
    let mut options = Vec::new();
    for (row, value) in args.given() {
        if !row.option {
            continue;
        }
        if row.name == "max_hold" && !renew {
            if let Value::Text(text) = value {
                errors.push(syn::Error::new(
                    text.span(),
                    "`max_hold` caps renewal, but this lock does not renew: add `renew` (the lease is then extended every ttl/3 while the body runs, for at most `max_hold`), or drop `max_hold`",
                ));
            }
            continue;
        }
        if let ("read", Value::Flag(read)) = (row.name, value) {
            if read_contradicted(args, read, errors) {
                continue;
            }
        }
        let checked = match (&row.kind, value) {
            (Kind::Flag, _) => Some(Checked::On),
            (Kind::Duration { .. }, Value::Text(text)) => {
                checked_duration(row.name, text, errors).map(Checked::Duration)
            }
            (Kind::Choice(choices), Value::Text(text)) => {
                let word = text.value();
                match choices.iter().find(|choice| choice.word == word) {
                    Some(choice) => Some(Checked::Choice(choice, text.clone())),
                    None => {
                        let listed: Vec<String> = choices
                            .iter()
                            .map(|choice| format!("\"{}\" ({})", choice.word, choice.means))
                            .collect();
                        errors.push(syn::Error::new(
                            text.span(),
                            format!(
                                "unknown `{}` value \"{word}\": use {}",
                                row.name,
                                listed.join(" or ")
                            ),
                        ));
                        None
                    }
                }
            }
            (Kind::Count, Value::Count(count)) => match count.base10_parse::<u32>() {
                Ok(0) => {
                    errors.push(syn::Error::new(
                        count.span(),
                        format!(
                            "`{} = 0` admits nobody: give how many may hold the lock at once, like `{} = 4` (1 is a plain lock)",
                            row.name, row.name
                        ),
                    ));
                    None
                }
                Ok(n) => Some(Checked::Count(n)),
                Err(_) => {
                    errors.push(syn::Error::new(
                        count.span(),
                        format!(
                            "`{}` must be a positive whole number up to {}, like `{} = 4`",
                            row.name,
                            u32::MAX,
                            row.name
                        ),
                    ));
                    None
                }
            },
            _ => None,
        };
        if let (Some(Checked::Count(permits)), Some(fenced)) = (&checked, args.flag("fenced")) {
            if *permits > 1 {
                errors.push(syn::Error::new(
                    fenced.span(),
                    format!(
                        "`fenced` orders the holders of one lease, and `permits = {permits}` lets {permits} hold it at once, so a fencing token could not tell a stale holder from a current one: drop `fenced`, or `permits`"
                    ),
                ));
                continue;
            }
        }
        if let (Some(Checked::Duration(at_least)), Some(ttl), Value::Text(text)) =
            (&checked, ttl, value)
        {
            if row.name == "at_least" && *at_least > ttl {
                let ttl_text = args.text("ttl").map(LitStr::value).unwrap_or_default();
                errors.push(syn::Error::new(
                    text.span(),
                    format!(
                        "`at_least = \"{}\"` is longer than `ttl = \"{ttl_text}\"`: the claim cannot stand longer than the lease lasts; raise `ttl` to at least \"{}\", or shorten `at_least`",
                        text.value(),
                        text.value()
                    ),
                ));
                continue;
            }
        }
        if let Some(checked) = checked {
            options.push((row.name, checked));
        }
    }
    options
}

/// Records why `read` cannot go with the other keys given, at the `read`
/// key, and says whether it could not: readers share the name already, so
/// `permits` (whatever its value) has nothing to count, and a fencing token
/// orders writers, while readers hold the name together.
fn read_contradicted(args: &Args, read: &Ident, errors: &mut Errors) -> bool {
    let permits = args.count("permits");
    if let Some(permits) = permits {
        errors.push(syn::Error::new(
            read.span(),
            format!(
                "`read` takes the name's read side, which any number of readers hold together, so `permits = {}` would make a semaphore of readers, which means nothing: drop `permits`, or `read`",
                permits.base10_digits()
            ),
        ));
    }
    let fenced = args.flag("fenced").is_some();
    if fenced {
        errors.push(syn::Error::new(
            read.span(),
            "`read` takes the name's read side, which readers hold together, and a `fenced` token orders the writers of a name, one after another, so a reader's token could not tell a stale holder from a current one: drop `fenced`, or `read`",
        ));
    }
    permits.is_some() || fenced
}

#[cfg(test)]
mod tests {
    use quote::quote;
    use syn::Signature;

    use super::*;
    use crate::validate::tests::settings;

    // Each lease option must reach the settings exactly as written.
    #[test]
    fn lease_options_are_read_as_written() {
        let sig: Signature = syn::parse_quote!(async fn f());
        let (checked, errors) = settings(
            quote!(
                ttl = "10m",
                renew,
                max_hold = "1h",
                on_lost = "cancel",
                at_least = "5m",
                fenced,
                shared,
                contended = "error"
            ),
            sig.clone(),
        );
        assert!(errors.is_empty(), "no errors: {errors:?}");
        let on = |name: &str| matches!(checked.option(name), Some(Checked::On));
        let duration = |name: &str| match checked.option(name) {
            Some(Checked::Duration(duration)) => Some(*duration),
            _ => None,
        };
        let word = |name: &str| match checked.option(name) {
            Some(Checked::Choice(choice, _)) => Some(choice.word),
            _ => None,
        };
        assert!(on("renew") && on("fenced") && on("shared"), "flags");
        assert_eq!(
            duration("max_hold"),
            Some(Duration::from_secs(3600)),
            "max_hold"
        );
        assert_eq!(word("on_lost"), Some("cancel"), "on_lost");
        assert_eq!(
            duration("at_least"),
            Some(Duration::from_secs(300)),
            "at_least"
        );
        assert!(checked.contended_error().is_some(), "contended");
        let (checked, errors) = settings(
            quote!(ttl = "1m", on_lost = "continue", contended = "none"),
            sig,
        );
        assert!(
            errors.is_empty(),
            "the defaults may be written out: {errors:?}"
        );
        let word = |name: &str| match checked.option(name) {
            Some(Checked::Choice(choice, _)) => Some(choice.word),
            _ => None,
        };
        assert_eq!(
            word("on_lost"),
            Some("continue"),
            "the default, written out"
        );
        assert!(checked.contended_error().is_none(), "and mean the defaults");
    }

    // Contradictions between options are compile errors, each saying the fix;
    // an invalid ttl is not compared with, so it is not reported twice.
    #[test]
    fn contradictory_lease_options_are_refused_with_the_fix() {
        let sig: Signature = syn::parse_quote!(async fn f());
        let (_, errors) = settings(
            quote!(
                ttl = "1m",
                max_hold = "1h",
                at_least = "2m",
                on_lost = "abort",
                contended = "err"
            ),
            sig.clone(),
        );
        assert_eq!(errors.len(), 4, "four mistakes: {errors:?}");
        assert!(errors[0].contains("add `renew`"), "{}", errors[0]);
        assert!(
            errors[1].contains("longer than `ttl = \"1m\"`") && errors[1].contains("raise `ttl`"),
            "{}",
            errors[1]
        );
        assert!(
            errors[2].contains("\"abort\"")
                && errors[2].contains("\"cancel\"")
                && errors[2].contains("\"continue\""),
            "{}",
            errors[2]
        );
        assert!(
            errors[3].contains("\"err\"")
                && errors[3].contains("\"none\"")
                && errors[3].contains("\"error\""),
            "{}",
            errors[3]
        );
        let (_, errors) = settings(quote!(ttl = "0s", at_least = "2m"), sig.clone());
        assert_eq!(errors.len(), 1, "only the zero ttl: {errors:?}");
        let (_, errors) = settings(
            quote!(ttl = "1m", at_least = "1m", renew, max_hold = "0s"),
            sig,
        );
        assert_eq!(errors.len(), 1, "at_least equal to ttl is fine: {errors:?}");
        assert!(errors[0].contains("zero `max_hold`"), "{}", errors[0]);
    }

    // `read` is the attribute form of `Lock::read`: it goes with the options
    // a reader may have (renewal, a claim, `shared`) and reaches the
    // settings as a flag, so the expansion writes `read: true`.
    #[test]
    fn read_goes_with_the_options_a_reader_may_have() {
        let sig: Signature = syn::parse_quote!(async fn f());
        let (checked, errors) = settings(
            quote!(
                ttl = "1m",
                read,
                renew,
                max_hold = "1h",
                at_least = "30s",
                shared
            ),
            sig,
        );
        assert!(
            errors.is_empty(),
            "a reader may renew and claim: {errors:?}"
        );
        assert!(
            matches!(checked.option("read"), Some(Checked::On)),
            "`read` reaches the settings"
        );
    }

    // Readers already share the name, so a count of them means nothing
    // whatever its value, and a fencing token orders writers only. Each
    // contradiction is its own error naming both keys and the fix, reported
    // with the others, and `read` is left out so nothing half-valid expands.
    #[test]
    fn read_with_permits_or_fenced_is_refused_with_the_fix() {
        let sig: Signature = syn::parse_quote!(async fn f());
        for permits in [quote!(permits = 1), quote!(permits = 4)] {
            let (checked, errors) = settings(quote!(ttl = "1m", read, #permits), sig.clone());
            assert_eq!(errors.len(), 1, "{permits}: one mistake: {errors:?}");
            assert!(
                errors[0].contains("semaphore of readers")
                    && errors[0].contains("drop `permits`, or `read`"),
                "{permits}: says why and the fix: {}",
                errors[0]
            );
            assert!(
                checked.option("read").is_none(),
                "{permits}: read is left out"
            );
        }
        let (checked, errors) = settings(quote!(ttl = "1m", fenced, read), sig.clone());
        assert_eq!(errors.len(), 1, "one mistake: {errors:?}");
        assert!(
            errors[0].contains("orders the writers")
                && errors[0].contains("drop `fenced`, or `read`"),
            "says why and the fix: {}",
            errors[0]
        );
        assert!(checked.option("read").is_none(), "read is left out");
        let (_, errors) = settings(quote!(ttl = "1m", read, permits = 4, fenced), sig);
        assert_eq!(
            errors.len(),
            3,
            "read with permits, read with fenced, fenced with permits: {errors:?}"
        );
    }
}
