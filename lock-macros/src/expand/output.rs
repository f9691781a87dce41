//! The return type: how the declared one maps onto the rewritten one
//! (`Result<Option<T>, E>`, `Result<Option<T>>` or `Result<Option<T>,
//! lock_core::Error>`), the type the body is checked against, and how a
//! lock error is converted into the function's error type.

use proc_macro2::{Ident, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{GenericArgument, PathArguments, ReturnType, Signature, Type};

/// How the declared return type maps onto the rewritten one.
pub(super) enum Output {
    /// `-> Result<T, E>`: lock errors become `E` through `From`.
    TwoArgs { err: Box<Type> },
    /// `-> Result<T>`, an alias with a fixed error type: lock errors go
    /// through `From` into whatever that error is.
    OneArg,
    /// Anything else (or nothing): lock errors are returned as `lock_core::Error`.
    Plain,
}

pub(super) fn classify(output: &ReturnType) -> Output {
    let ReturnType::Type(_, ty) = output else {
        return Output::Plain;
    };
    let Type::Path(path) = &**ty else {
        return Output::Plain;
    };
    if path.qself.is_some() {
        return Output::Plain;
    }
    let Some(last) = path.path.segments.last() else {
        return Output::Plain;
    };
    // Type aliases cannot be resolved here; a path whose last name ends in
    // `Result` is taken to be one (`io::Result<T>`, `AppResult<T>`).
    if !last.ident.to_string().ends_with("Result") {
        return Output::Plain;
    }
    let PathArguments::AngleBracketed(generic) = &last.arguments else {
        return Output::Plain;
    };
    let types: Vec<&Type> = generic
        .args
        .iter()
        .filter_map(|arg| match arg {
            GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect();
    if types.len() != generic.args.len() {
        return Output::Plain;
    }
    match types.as_slice() {
        [_] => Output::OneArg,
        [_, err] => Output::TwoArgs {
            err: Box::new((*err).clone()),
        },
        _ => Output::Plain,
    }
}

/// The rewritten return type: `Result<Option<T>, E>`, `Result<Option<T>>` or
/// `Result<Option<T>, lock_core::Error>`.
pub(super) fn rewritten_output(output: &ReturnType, shape: &Output, krate: &syn::Path) -> Type {
    match (output, shape) {
        (ReturnType::Type(_, ty), Output::TwoArgs { .. } | Output::OneArg) => {
            let mut ty = (**ty).clone();
            if let Type::Path(path) = &mut ty {
                if let Some(last) = path.path.segments.last_mut() {
                    if let PathArguments::AngleBracketed(generic) = &mut last.arguments {
                        if let Some(GenericArgument::Type(ok)) = generic.args.first_mut() {
                            let span = ok.span();
                            *ok = syn::parse_quote_spanned!(span=> ::core::option::Option<#ok>);
                        }
                    }
                }
            }
            ty
        }
        (ReturnType::Type(_, ty), Output::Plain) => {
            syn::parse_quote_spanned!(ty.span()=> ::core::result::Result<::core::option::Option<#ty>, #krate::Error>)
        }
        (ReturnType::Default, _) => {
            syn::parse_quote!(::core::result::Result<::core::option::Option<()>, #krate::Error>)
        }
    }
}

/// The declared return type with every `impl Trait` replaced by `_`, for
/// the fake return edge (`impl Trait` is not allowed in a turbofish).
pub(super) fn body_type(output: &ReturnType) -> Type {
    match output {
        ReturnType::Default => syn::parse_quote!(()),
        ReturnType::Type(_, ty) => infer_impl_trait((**ty).clone()),
    }
}

/// `ty` with every `impl Trait` in it replaced by `_`.
fn infer_impl_trait(mut ty: Type) -> Type {
    struct Infer;
    impl VisitMut for Infer {
        fn visit_type_mut(&mut self, ty: &mut Type) {
            if let Type::ImplTrait(found) = ty {
                let span = found.impl_token.span;
                *ty = syn::parse_quote_spanned!(span=> _);
            } else {
                syn::visit_mut::visit_type_mut(self, ty);
            }
        }
    }
    Infer.visit_type_mut(&mut ty);
    ty
}

/// The expression converting the lock error `error` into the function's
/// error type, for the rewritten return type of `shape`; `private` is the
/// path to lock-core's `__private`.
pub(super) fn lock_error_conversion(
    shape: &Output,
    sig: &Signature,
    private: &TokenStream,
    error: &Ident,
) -> TokenStream {
    // Spanned at the error type (or the alias), so a missing
    // `From<lock_core::Error>` is reported there, in FromLockError's words.
    match (shape, &sig.output) {
        (Output::TwoArgs { err }, _) => {
            // A generic error type cannot get an `impl From`; the trait
            // used here decides which fix the compiler suggests.
            let via = if is_generic(err, &sig.generics) {
                quote!(FromLockErrorBound)
            } else {
                quote!(FromLockError)
            };
            let err = infer_impl_trait((**err).clone());
            quote_spanned!(err.span()=> <#err as #private::#via>::from_lock_error(#error))
        }
        // The alias hides its error type; it is inferred from the `Err` the
        // conversion goes into (naming it through the alias would leave any
        // `impl Trait` in the success type uninferred).
        (Output::OneArg, ReturnType::Type(_, ty)) => quote_spanned!(ty.span()=>
            <_ as #private::FromLockError>::from_lock_error(#error)
        ),
        _ => error.to_token_stream(),
    }
}

/// Whether `ty` depends on the function's generics: names one of its type
/// parameters or `Self`, or is a qualified path (`<M as Trait>::Error`).
fn is_generic(ty: &Type, generics: &syn::Generics) -> bool {
    if let Type::Path(path) = ty {
        if path.qself.is_some() {
            return true;
        }
    }
    let params: Vec<String> = generics
        .type_params()
        .map(|param| param.ident.to_string())
        .chain(std::iter::once("Self".to_owned()))
        .collect();
    params
        .iter()
        .any(|param| mentions_ident(ty.to_token_stream(), param))
}

/// Whether `tokens` name the identifier `name` anywhere, nested groups
/// included.
pub(super) fn mentions_ident(tokens: TokenStream, name: &str) -> bool {
    tokens.into_iter().any(|token| match token {
        proc_macro2::TokenTree::Ident(ident) => ident == name,
        proc_macro2::TokenTree::Group(group) => mentions_ident(group.stream(), name),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(output: ReturnType) -> &'static str {
        match classify(&output) {
            Output::TwoArgs { .. } => "two",
            Output::OneArg => "one",
            Output::Plain => "plain",
        }
    }

    // The return-type table in the docs is this function; each row must hold.
    #[test]
    fn return_types_are_classified_as_the_docs_table_says() {
        assert_eq!(
            shape(syn::parse_quote!(-> Result<u8, E>)),
            "two",
            "Result<T, E>"
        );
        assert_eq!(
            shape(syn::parse_quote!(-> std::result::Result<u8, E>)),
            "two",
            "a path to Result"
        );
        assert_eq!(
            shape(syn::parse_quote!(-> anyhow::Result<u8>)),
            "one",
            "alias"
        );
        assert_eq!(
            shape(syn::parse_quote!(-> io::Result<()>)),
            "one",
            "io alias"
        );
        assert_eq!(
            shape(syn::parse_quote!(-> AppResult<u8>)),
            "one",
            "own alias"
        );
        assert_eq!(
            shape(syn::parse_quote!(-> Resulting<u8>)),
            "plain",
            "not a Result name"
        );
        assert_eq!(shape(syn::parse_quote!(-> u8)), "plain", "a plain type");
        assert_eq!(
            shape(syn::parse_quote!(-> fmt::Result)),
            "plain",
            "no arguments"
        );
        assert_eq!(
            shape(syn::parse_quote!(-> Option<u8>)),
            "plain",
            "not a Result"
        );
        assert_eq!(shape(ReturnType::Default), "plain", "nothing");
    }

    // The rewritten type is what callers see, so it must be exactly the
    // documented one, keeping the user's own path to `Result`.
    #[test]
    fn the_rewritten_return_type_wraps_the_success_type_in_option() {
        let krate: syn::Path = syn::parse_quote!(::lock_core);
        let rewrite = |output: ReturnType| {
            let shape = classify(&output);
            rewritten_output(&output, &shape, &krate)
                .to_token_stream()
                .to_string()
                .replace(' ', "")
        };
        assert_eq!(
            rewrite(syn::parse_quote!(-> Result<u8, E>)),
            "Result<::core::option::Option<u8>,E>",
            "two arguments"
        );
        assert_eq!(
            rewrite(syn::parse_quote!(-> anyhow::Result<u8>)),
            "anyhow::Result<::core::option::Option<u8>>",
            "alias"
        );
        assert_eq!(
            rewrite(syn::parse_quote!(-> u8)),
            "::core::result::Result<::core::option::Option<u8>,::lock_core::Error>",
            "plain"
        );
        assert_eq!(
            rewrite(ReturnType::Default),
            "::core::result::Result<::core::option::Option<()>,::lock_core::Error>",
            "unit"
        );
    }

    // `impl Trait` cannot appear in a turbofish; the fake return edge needs `_`.
    #[test]
    fn impl_trait_in_the_body_type_becomes_an_inferred_type() {
        let ty = body_type(&syn::parse_quote!(-> Result<impl Display, Vec<impl Debug>>));
        assert_eq!(
            ty.to_token_stream().to_string().replace(' ', ""),
            "Result<_,Vec<_>>",
            "every impl Trait replaced"
        );
    }

    // Only a generic error type gets the where-bound advice.
    #[test]
    fn an_error_type_that_depends_on_the_generics_is_told_apart() {
        let generics: syn::Generics = syn::parse_quote!(<M: Store, E>);
        let generic = |ty: Type| is_generic(&ty, &generics);
        assert!(generic(syn::parse_quote!(E)), "a type parameter");
        assert!(generic(syn::parse_quote!(M::Error)), "an associated type");
        assert!(
            generic(syn::parse_quote!(<M as Store>::Error)),
            "a qualified path"
        );
        assert!(generic(syn::parse_quote!(Box<E>)), "inside another type");
        assert!(generic(syn::parse_quote!(Self)), "Self");
        assert!(!generic(syn::parse_quote!(AppError)), "a concrete type");
        assert!(!generic(syn::parse_quote!(std::io::Error)), "a path");
    }
}
