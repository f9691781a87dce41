//! Turning the parsed arguments into settings: durations, the name template
//! checked against the function's arguments, the manager, the crate path,
//! and the lease options, checked against each other in `options`.
//!
//! Every problem is recorded; each setting that is wrong gets a placeholder
//! value so the function can still be emitted and the rest of the crate keeps
//! type-checking while the user fixes the attribute.

mod options;

use std::time::Duration;

use syn::{FnArg, LitStr, Pat, Signature};

use crate::Errors;
use crate::args::{Args, attribute_span};
use crate::duration;
use crate::keys::{Kind, key};
use crate::template::{self, Piece};
pub(crate) use options::Checked;
use options::options;

/// Everything the expansion needs, checked.
pub(crate) struct Settings {
    /// Path to the runtime crate, `::lock_core` unless `crate = ".."` says otherwise.
    pub(crate) krate: syn::Path,
    pub(crate) name: Name,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) manager: Option<LitStr>,
    /// The `lock_core::LockOptions` fields the attribute set, checked, in
    /// the order written; the others keep their defaults.
    pub(crate) options: Vec<(&'static str, Checked)>,
}

impl Settings {
    /// The option `name`, if the attribute set it.
    pub(crate) fn option(&self, name: &str) -> Option<&Checked> {
        self.options
            .iter()
            .find(|(field, _)| *field == name)
            .map(|(_, value)| value)
    }

    /// `contended = "error"`, with its literal for the span of errors about
    /// it; `None` for the default.
    pub(crate) fn contended_error(&self) -> Option<&LitStr> {
        match self.option("contended") {
            Some(Checked::Choice(choice, literal)) if choice.word == "error" => Some(literal),
            _ => None,
        }
    }
}

/// Where the lock name comes from.
pub(crate) enum Name {
    /// No `name`: the function's module path and name.
    Default,
    /// A `name` template, parsed.
    Template { literal: LitStr, pieces: Vec<Piece> },
}

/// Used in place of a missing or invalid `ttl`, so the function still expands.
const PLACEHOLDER_TTL: Duration = Duration::from_secs(1);

impl Settings {
    /// Checks `args` against each other and against `sig`.
    pub(crate) fn new(args: Args, sig: &Signature, errors: &mut Errors) -> Settings {
        let krate = match args.text("crate") {
            None => syn::parse_quote!(::lock_core),
            Some(text) => match text.parse::<syn::Path>() {
                Ok(path) => path,
                Err(_) => {
                    errors.push(syn::Error::new(
                        text.span(),
                        "`crate` must be the path to lock_core as this crate names it, like \"::lock_core\" or \"locks\"",
                    ));
                    syn::parse_quote!(::lock_core)
                }
            },
        };
        let ttl = match args.text("ttl") {
            None if args.written.contains(&"ttl") => None,
            None => {
                errors.push(syn::Error::new(
                    attribute_span(),
                    "`ttl` is required: a lock with no expiry is never released if its holder dies; add `ttl = \"30s\"` (the longest the work may take)",
                ));
                None
            }
            Some(text) => checked_duration("ttl", text, errors),
        };
        let wait = args
            .text("wait")
            .and_then(|text| checked_duration("wait", text, errors))
            .unwrap_or(Duration::ZERO);
        if let Some(manager) = args.text("manager") {
            if manager.value().trim().is_empty() {
                errors.push(syn::Error::new(
                    manager.span(),
                    "`manager` is empty: give the name the manager was installed under with `registry::install_named`, or leave `manager` out to use the default manager",
                ));
            }
        }
        let options = options(&args, ttl, errors);
        let name = match args.text("name") {
            None => Name::Default,
            Some(literal) => check_name(literal.clone(), sig, errors),
        };
        Settings {
            krate,
            name,
            ttl: ttl.unwrap_or(PLACEHOLDER_TTL),
            wait,
            manager: args.text("manager").cloned(),
            options,
        }
    }
}

/// The duration written for the key `name`, or `None` after recording why
/// it is refused (unparsable, or zero where the key's row refuses zero).
fn checked_duration(name: &str, text: &LitStr, errors: &mut Errors) -> Option<Duration> {
    match duration::parse(&text.value()) {
        Ok(duration) if duration.is_zero() => match key(name).kind {
            Kind::Duration {
                zero: Some(refusal),
            } => {
                errors.push(syn::Error::new(text.span(), refusal));
                None
            }
            _ => Some(duration),
        },
        Ok(duration) => Some(duration),
        Err(message) => {
            errors.push(syn::Error::new(text.span(), format!("`{name}`: {message}")));
            None
        }
    }
}

fn check_name(literal: LitStr, sig: &Signature, errors: &mut Errors) -> Name {
    let text = literal.value();
    if text.is_empty() {
        errors.push(syn::Error::new(
            literal.span(),
            "the lock name is empty: name the resource the function protects, like \"reports:{tenant}\", or leave `name` out to use the function's path",
        ));
        return Name::Default;
    }
    let pieces = match template::parse(&text) {
        Ok(pieces) => pieces,
        Err(message) => {
            errors.push(syn::Error::new(literal.span(), message));
            return Name::Default;
        }
    };
    let arguments = argument_names(sig);
    let has_self = sig.receiver().is_some();
    let mut ok = true;
    for piece in &pieces {
        let Piece::Field { root, fields } = piece else {
            continue;
        };
        let written = std::iter::once(root.as_str())
            .chain(fields.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(".");
        if root == "self" {
            if !has_self {
                errors.push(syn::Error::new(
                    literal.span(),
                    format!(
                        "`{{{written}}}` needs a method that takes `self`, and `{}` does not; use one of its arguments instead ({})",
                        sig.ident,
                        describe(&arguments)
                    ),
                ));
                ok = false;
            }
        } else if !arguments.iter().any(|argument| argument == root) {
            errors.push(syn::Error::new(
                literal.span(),
                format!(
                    "`{{{written}}}` is not an argument of `{}`: {}",
                    sig.ident,
                    describe_with_self(&arguments, has_self)
                ),
            ));
            ok = false;
        }
    }
    if ok {
        Name::Template { literal, pieces }
    } else {
        Name::Default
    }
}

fn describe(arguments: &[String]) -> String {
    if arguments.is_empty() {
        "it takes no named arguments".to_owned()
    } else {
        let quoted: Vec<String> = arguments.iter().map(|a| format!("`{a}`")).collect();
        format!("its arguments are {}", quoted.join(", "))
    }
}

fn describe_with_self(arguments: &[String], has_self: bool) -> String {
    let mut names: Vec<String> = Vec::new();
    if has_self {
        names.push("self".to_owned());
    }
    names.extend(arguments.iter().cloned());
    if names.is_empty() {
        "it takes no arguments, so the name cannot have placeholders".to_owned()
    } else {
        let quoted: Vec<String> = names.iter().map(|a| format!("`{a}`")).collect();
        format!("placeholders can use {}", quoted.join(", "))
    }
}

/// Every name bound by the function's parameter patterns, in order.
pub(crate) fn argument_names(sig: &Signature) -> Vec<String> {
    let mut names = Vec::new();
    for input in &sig.inputs {
        if let FnArg::Typed(typed) = input {
            bindings(&typed.pat, &mut names);
        }
    }
    names
}

fn bindings(pat: &Pat, names: &mut Vec<String>) {
    match pat {
        Pat::Ident(ident) => {
            names.push(ident.ident.to_string());
            if let Some((_, sub)) = &ident.subpat {
                bindings(sub, names);
            }
        }
        Pat::Tuple(tuple) => tuple.elems.iter().for_each(|p| bindings(p, names)),
        Pat::TupleStruct(tuple) => tuple.elems.iter().for_each(|p| bindings(p, names)),
        Pat::Struct(strukt) => strukt
            .fields
            .iter()
            .for_each(|field| bindings(&field.pat, names)),
        Pat::Reference(reference) => bindings(&reference.pat, names),
        Pat::Slice(slice) => slice.elems.iter().for_each(|p| bindings(p, names)),
        Pat::Paren(paren) => bindings(&paren.pat, names),
        Pat::Type(typed) => bindings(&typed.pat, names),
        _ => {}
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use quote::quote;

    /// The settings `args` give a function of signature `sig`, and the
    /// error messages.
    pub(crate) fn settings(
        args: proc_macro2::TokenStream,
        sig: Signature,
    ) -> (Settings, Vec<String>) {
        let mut errors = Errors::default();
        let args = Args::parse(args, &mut errors);
        let settings = Settings::new(args, &sig, &mut errors);
        (settings, errors.messages())
    }

    // Placeholders may use any name a parameter pattern binds, so pattern
    // parameters can be named in templates too.
    #[test]
    fn every_binding_of_every_parameter_pattern_is_an_argument_name() {
        let sig: Signature = syn::parse_quote!(
            async fn f(&self, a: u8, (b, mut c): (u8, u8), Point { x, y: why }: Point, _: u8)
        );
        assert_eq!(
            argument_names(&sig),
            ["a", "b", "c", "x", "why"],
            "receiver and `_` bind no names"
        );
    }

    // A placeholder naming no argument must say which names exist, so the fix
    // is obvious from the message alone.
    #[test]
    fn an_unknown_placeholder_lists_the_arguments() {
        let sig: Signature = syn::parse_quote!(async fn build(tenant: &str, day: u32));
        let (_, errors) = settings(quote!(name = "r:{tenant}:{tenat}", ttl = "1m"), sig);
        assert_eq!(errors.len(), 1, "one bad placeholder: {errors:?}");
        assert!(
            errors[0].contains("`{tenat}` is not an argument of `build`")
                && errors[0].contains("`tenant`, `day`"),
            "{}",
            errors[0]
        );
    }

    // `{self.x}` in a free function must be refused, not left to a confusing
    // "self is not available" error from the compiler.
    #[test]
    fn a_self_placeholder_needs_a_receiver() {
        let sig: Signature = syn::parse_quote!(async fn f(id: u32));
        let (_, errors) = settings(quote!(name = "{self.id}", ttl = "1m"), sig);
        assert!(
            errors[0].contains("needs a method that takes `self`"),
            "{errors:?}"
        );
    }

    // Bad values fall back to placeholders so the function still expands,
    // and every problem is still reported.
    #[test]
    fn bad_values_are_reported_and_replaced_by_placeholders() {
        let sig: Signature = syn::parse_quote!(async fn f());
        let (settings, errors) = settings(quote!(name = "", wait = "1q", manager = ""), sig);
        assert_eq!(
            errors.len(),
            4,
            "missing ttl, bad wait, empty manager, empty name: {errors:?}"
        );
        assert_eq!(settings.ttl, PLACEHOLDER_TTL, "placeholder ttl");
        assert_eq!(settings.wait, Duration::ZERO, "placeholder wait");
        assert!(matches!(settings.name, Name::Default), "placeholder name");
    }

    // A `ttl` that was written but is wrong (or misspelt) gets one error
    // about what is wrong, not a second one claiming it is missing.
    #[test]
    fn a_written_but_wrong_ttl_is_not_also_reported_missing() {
        let sig: Signature = syn::parse_quote!(async fn f());
        let (_, errors) = settings(quote!(ttl = 10), sig.clone());
        assert_eq!(errors.len(), 1, "only the value error: {errors:?}");
        let (_, errors) = settings(quote!(tll = "1s"), sig.clone());
        assert_eq!(errors.len(), 1, "only the did-you-mean: {errors:?}");
        let (_, errors) = settings(quote!(name = "x"), sig);
        assert!(errors[0].contains("`ttl` is required"), "{errors:?}");
    }

    // A zero ttl parses as a duration but can never hold a lock.
    #[test]
    fn a_zero_ttl_is_refused_but_a_zero_wait_means_do_not_wait() {
        let sig: Signature = syn::parse_quote!(async fn f());
        let (_, errors) = settings(quote!(ttl = "0s", wait = "0s"), sig);
        assert_eq!(errors.len(), 1, "only the ttl is wrong: {errors:?}");
        assert!(errors[0].contains("zero `ttl`"), "{}", errors[0]);
    }
}
