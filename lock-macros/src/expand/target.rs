//! What the attribute was put on, and the functions it refuses to wrap:
//! anything but an `async fn` with a body, a method `#[async_trait]` or a
//! runtime attribute has already rewritten, an entry point whose return
//! type it would change, `contended = "error"` with nowhere to put the
//! error. Each refusal says what to write instead.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, ItemFn, ReturnType, Signature, Token, Visibility};

use super::output::{Output, classify, mentions_ident};
use crate::validate::Settings;

/// What the attribute was put on.
pub(super) enum Target {
    Fn(Box<ItemFn>),
    /// A function signature without a body (`fn f();`), as in a trait.
    NoBody(Box<Signature>, Token![;]),
    /// Anything else; the span of the token to blame.
    Other(Span),
}

impl Target {
    pub(super) fn parse(item: TokenStream) -> Target {
        let parser = |input: ParseStream<'_>| -> syn::Result<Target> {
            let ahead = input.fork();
            ahead.call(Attribute::parse_outer)?;
            ahead.parse::<Visibility>()?;
            let blamed = ahead.span();
            let Ok(sig) = ahead.parse::<Signature>() else {
                input.parse::<TokenStream>()?;
                return Ok(Target::Other(blamed));
            };
            if ahead.peek(Token![;]) {
                let semi = ahead.parse()?;
                input.parse::<TokenStream>()?;
                return Ok(Target::NoBody(Box::new(sig), semi));
            }
            Ok(Target::Fn(Box::new(input.parse()?)))
        };
        parser
            .parse2(item)
            .unwrap_or_else(|error| Target::Other(error.span()))
    }
}

/// A function the attribute cannot wrap, and why.
pub(super) fn shape_error(function: &ItemFn) -> Option<syn::Error> {
    let sig = &function.sig;
    if is_async_trait_method(sig) {
        return Some(syn::Error::new(
            sig.fn_token.span,
            "#[locked] cannot go inside #[async_trait]: it changes the return type to `Result<Option<T>, E>`, which no longer matches the trait; put #[locked] on an inherent async method and call it from the trait impl",
        ));
    }
    if sig.asyncness.is_none() && is_runtime_entry_point(function) {
        return Some(syn::Error::new(
            sig.fn_token.span,
            "#[locked] must go above #[tokio::main] or #[tokio::test]: attributes apply top to bottom, so the runtime attribute above #[locked] has already turned this `async fn` into a plain `fn` that starts a runtime; move #[locked] above it (with `contended = \"error\"` and a `Result<(), E>` return: `main` and tests cannot return an `Option`)",
        ));
    }
    if sig.asyncness.is_none() {
        return Some(syn::Error::new(
            sig.fn_token.span,
            format!(
                "#[locked] needs an `async fn`: taking the lock waits on the store; write `async fn {}`",
                sig.ident
            ),
        ));
    }
    if let Some(constness) = &sig.constness {
        return Some(syn::Error::new(
            constness.span,
            "#[locked] cannot wrap a `const fn`: remove `const`",
        ));
    }
    None
}

/// What `#[tokio::main]` and `#[tokio::test]` leave behind when they run
/// before `#[locked]`: a plain `fn` whose first statement binds the
/// original body as an `async` block, and which then `block_on`s it.
fn is_runtime_entry_point(function: &ItemFn) -> bool {
    let binds_async_body = matches!(
        function.block.stmts.first(),
        Some(syn::Stmt::Local(syn::Local {
            init: Some(syn::LocalInit { expr, .. }),
            ..
        })) if matches!(**expr, syn::Expr::Async(_))
    );
    binds_async_body && mentions_ident(function.block.to_token_stream(), "block_on")
}

/// `#[locked]` above `#[tokio::main]`, `#[tokio::test]` or `#[test]`, on a
/// function whose return type it would wrap in `Option`: `main` and tests
/// must return `()` or a `Result<(), E>`, so only `contended = "error"`,
/// which keeps the declared type, can work there.
pub(super) fn entry_point_without_contended_error(
    settings: &Settings,
    function: &ItemFn,
) -> Option<syn::Error> {
    if settings.contended_error().is_some() {
        return None;
    }
    let entry = function.attrs.iter().find(|attr| {
        let path = attr.path();
        let last = path
            .segments
            .last()
            .map(|segment| segment.ident.to_string());
        match last.as_deref() {
            Some("test") => true,
            Some("main") => path.segments.len() > 1,
            _ => false,
        }
    })?;
    Some(syn::Error::new_spanned(
        entry,
        format!(
            "`{}` is a program or test entry point, which must return `()` or `Result<(), E>`, but #[locked] would make it return `Result<Option<..>, ..>`; add `contended = \"error\"` to #[locked] (contention then becomes an error) and declare `-> Result<(), lock_core::Error>` or another error type that takes lock errors",
            function.sig.ident
        ),
    ))
}

/// `contended = "error"` on a function that cannot return an error: there
/// is no `Result` for the contention to go into.
pub(super) fn contended_error_without_result(
    settings: &Settings,
    sig: &Signature,
) -> Option<syn::Error> {
    let literal = settings.contended_error()?;
    if !matches!(classify(&sig.output), Output::Plain) {
        return None;
    }
    let (declared, value) = match &sig.output {
        ReturnType::Default => ("returns nothing".to_owned(), "()".to_owned()),
        ReturnType::Type(_, ty) => {
            let ty = ty.to_token_stream().to_string();
            (format!("returns `{ty}`"), ty)
        }
    };
    Some(syn::Error::new(
        literal.span(),
        format!(
            "`contended = \"error\"` returns contention as an `Err`, but `{}` {declared}, which has no error channel: declare `-> Result<{value}, lock_core::Error>` (or `Result<{value}, E>` with `E: From<lock_core::Error>`), or drop `contended` to get `Ok(None)` when the lock is held",
            sig.ident
        ),
    ))
}

/// `#[async_trait]` expands first and leaves a non-async method with an
/// `'async_trait` lifetime; recognise it to say what to do instead.
fn is_async_trait_method(sig: &Signature) -> bool {
    sig.asyncness.is_none()
        && sig
            .generics
            .lifetimes()
            .any(|param| param.lifetime.ident == "async_trait")
}

#[cfg(test)]
mod tests {
    use super::*;

    // What #[tokio::main] leaves behind is recognised; a plain function that
    // happens to call `block_on` is not, and keeps the "write `async fn`"
    // message.
    #[test]
    fn a_runtime_entry_point_is_told_apart_from_a_plain_blocking_function() {
        let expanded: ItemFn = syn::parse_quote! {
            fn main() {
                let body = async { work().await };
                return tokio::runtime::Builder::new_current_thread()
                    .build()
                    .expect("runtime")
                    .block_on(body);
            }
        };
        assert!(is_runtime_entry_point(&expanded), "tokio's expansion");
        let plain: ItemFn = syn::parse_quote! {
            fn main() {
                let runtime = tokio::runtime::Runtime::new().expect("runtime");
                runtime.block_on(work());
            }
        };
        assert!(!is_runtime_entry_point(&plain), "a hand-written block_on");
    }
}
