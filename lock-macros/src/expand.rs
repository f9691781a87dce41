//! Emitting the locked function.
//!
//! The expansion keeps the user's signature (only the return type changes),
//! attributes and statements, and wraps the statements like this:
//!
//! ```text
//! <submit a DeclaredLock for registry::declared()>
//! let lock = __private::lock(manager, name, TTL, WAIT, OPTIONS); // Result<Lock>
//! let work = async move { <fake return edge> <statements> };
//! // Body returns Result<T, E>: Lock::run (or, with contended = "error",
//! // Lock::run_or_contended), keeping the body's error apart from lock errors.
//! match __private::run(lock, work).await {
//!     Ok(value) => Ok(value),                           // Some(T), or None: contended
//!     Err(Failure::Work(error)) => Err(error),          // the body's own error
//!     Err(Failure::Lock(error)) => Err(convert(error)), // E: From<lock_core::Error>
//! }
//! // Body returns a plain T: __private::run_plain(lock, work).await
//! ```
//!
//! Everything about the lease (acquire, renewal, the lost-lease reaction,
//! `at_least`, release, release on panic or cancellation) is `Lock::run`'s,
//! so a locked function behaves exactly like the runtime builder. The
//! statements run in an `async move` block of their own so that `return`
//! and `?` inside them return from the body, with the declared type, not from
//! the rewritten function.

use std::time::Duration;

use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::parse::{ParseStream, Parser};
use syn::spanned::Spanned;
use syn::visit_mut::VisitMut;
use syn::{
    AttrStyle, Attribute, GenericArgument, ItemFn, LitStr, Member, PathArguments, ReturnType,
    Signature, Token, Type, Visibility,
};

use crate::Errors;
use crate::args::Args;
use crate::keys::KEYS;
use crate::template::{self, Piece};
use crate::validate::{Checked, Name, Settings};

/// The whole attribute: parse, check, emit. Never fails: problems become
/// compile errors emitted next to the (possibly unchanged) function.
pub(crate) fn locked(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = Args::parse(args, &mut errors);
    let expanded = match Target::parse(item.clone()) {
        Target::Other(span) => {
            errors.push(syn::Error::new(
                span,
                "#[locked] goes on an `async fn`: it runs the function's body while holding a lock; put it on the function that does the work",
            ));
            item
        }
        Target::NoBody(sig, semi) => {
            errors.push(syn::Error::new(
                semi.span,
                "#[locked] needs a function body to run under the lock; in a trait, put #[locked] on an inherent method of the implementing type and call it from the trait impl",
            ));
            Settings::new(args, &sig, &mut errors);
            item
        }
        Target::Fn(function) => match shape_error(&function) {
            Some(error) => {
                errors.push(error);
                Settings::new(args, &function.sig, &mut errors);
                item
            }
            None => {
                let settings = Settings::new(args, &function.sig, &mut errors);
                let refused = contended_error_without_result(&settings, &function.sig)
                    .or_else(|| entry_point_without_contended_error(&settings, &function));
                match refused {
                    Some(error) => {
                        errors.push(error);
                        item
                    }
                    None => expand(*function, &settings, &mut errors),
                }
            }
        },
    };
    let mut tokens = errors.into_compile_errors();
    tokens.extend(expanded);
    tokens
}

/// What the attribute was put on.
enum Target {
    Fn(Box<ItemFn>),
    /// A function signature without a body (`fn f();`), as in a trait.
    NoBody(Box<Signature>, Token![;]),
    /// Anything else; the span of the token to blame.
    Other(Span),
}

impl Target {
    fn parse(item: TokenStream) -> Target {
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
fn shape_error(function: &ItemFn) -> Option<syn::Error> {
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

fn mentions_ident(tokens: TokenStream, name: &str) -> bool {
    tokens.into_iter().any(|token| match token {
        proc_macro2::TokenTree::Ident(ident) => ident == name,
        proc_macro2::TokenTree::Group(group) => mentions_ident(group.stream(), name),
        _ => false,
    })
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

/// `#[locked]` above `#[tokio::main]`, `#[tokio::test]` or `#[test]`, on a
/// function whose return type it would wrap in `Option`: `main` and tests
/// must return `()` or a `Result<(), E>`, so only `contended = "error"`,
/// which keeps the declared type, can work there.
fn entry_point_without_contended_error(
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
fn contended_error_without_result(settings: &Settings, sig: &Signature) -> Option<syn::Error> {
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

/// How the declared return type maps onto the rewritten one.
enum Output {
    /// `-> Result<T, E>`: lock errors become `E` through `From`.
    TwoArgs { err: Box<Type> },
    /// `-> Result<T>`, an alias with a fixed error type: lock errors go
    /// through `From` into whatever that error is.
    OneArg,
    /// Anything else (or nothing): lock errors are returned as `lock_core::Error`.
    Plain,
}

fn classify(output: &ReturnType) -> Output {
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
fn rewritten_output(output: &ReturnType, shape: &Output, krate: &syn::Path) -> Type {
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
fn body_type(output: &ReturnType) -> Type {
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

fn duration_tokens(duration: Duration) -> TokenStream {
    let secs = duration.as_secs();
    let nanos = duration.subsec_nanos();
    if nanos == 0 {
        quote!(::core::time::Duration::from_secs(#secs))
    } else if let Ok(nanos) = u64::try_from(duration.as_nanos()) {
        quote!(::core::time::Duration::from_nanos(#nanos))
    } else {
        quote!(::core::time::Duration::new(#secs, #nanos))
    }
}

/// The `LockOptions` constant: the fields the attribute set, each from its
/// kind in the key table, the name template as the metrics label, and the
/// defaults for the rest.
fn options_tokens(settings: &Settings, template: &TokenStream, krate: &syn::Path) -> TokenStream {
    let fields = settings.options.iter().map(|(field, value)| {
        let field = Ident::new(field, Span::call_site());
        let value = match value {
            Checked::On => quote!(true),
            Checked::Duration(duration) => {
                let duration = duration_tokens(*duration);
                quote!(::core::option::Option::Some(#duration))
            }
            Checked::Count(count) => quote!(#count),
            Checked::Choice(choice, _) => {
                let path: syn::Path = syn::parse_str(choice.path)
                    .unwrap_or_else(|_| unreachable!("the key table's paths parse"));
                quote!(#krate::#path)
            }
        };
        quote!(#field: #value,)
    });
    // Every field written: no defaults to fill in (an update with nothing
    // left to update would trip clippy in the user's crate).
    let all = KEYS.iter().filter(|key| key.option).count();
    let rest = (settings.options.len() < all).then(|| quote!(..#krate::LockOptions::DEFAULT));
    quote! {
        #krate::LockOptions {
            #(#fields)*
            label: ::core::option::Option::Some(#template),
            #rest
        }
    }
}

/// The expression producing the lock name on each call.
fn name_tokens(name: &Name, fn_name: &str, errors: &mut Errors) -> TokenStream {
    let (literal, pieces) = match name {
        Name::Default => {
            return quote!(::core::concat!(::core::module_path!(), "::", #fn_name));
        }
        Name::Template { literal, pieces } => (literal, pieces),
    };
    let span = literal.span();
    if let Some(fixed) = template::literal(pieces) {
        return LitStr::new(&fixed, span).into_token_stream();
    }
    let mut format = String::new();
    let mut values = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Text(text) => format.push_str(&text.replace('{', "{{").replace('}', "}}")),
            Piece::Field { root, fields } => {
                format.push_str("{}");
                let root = if root == "self" {
                    quote_spanned!(span=> self)
                } else {
                    Ident::new(root, span).into_token_stream()
                };
                let mut members = Vec::new();
                for field in fields {
                    match syn::parse_str::<Member>(field) {
                        Ok(mut member) => {
                            if let Member::Named(ident) = &mut member {
                                ident.set_span(span);
                            } else if let Member::Unnamed(index) = &mut member {
                                index.span = span;
                            }
                            members.push(member);
                        }
                        Err(_) => errors.push(syn::Error::new(
                            span,
                            format!("`{field}` cannot be a field name in the lock name: use a plain field name or a tuple index"),
                        )),
                    }
                }
                values.push(quote_spanned!(span=> #root #(.#members)*));
            }
        }
    }
    let format = LitStr::new(&format, span);
    quote_spanned!(span=> ::std::format!(#format #(, #values)*))
}

/// The declared-lock record: `(template, exact name if fixed)`.
fn declared_name(name: &Name, fn_name: &str) -> (TokenStream, TokenStream) {
    match name {
        Name::Default => {
            let path = quote!(::core::concat!(::core::module_path!(), "::", #fn_name));
            (path.clone(), quote!(::core::option::Option::Some(#path)))
        }
        Name::Template { literal, pieces } => match template::literal(pieces) {
            Some(fixed) => (
                literal.to_token_stream(),
                quote!(::core::option::Option::Some(#fixed)),
            ),
            None => (
                literal.to_token_stream(),
                quote!(::core::option::Option::None),
            ),
        },
    }
}

fn expand(function: ItemFn, settings: &Settings, errors: &mut Errors) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
        ..
    } = function;
    let krate = &settings.krate;
    let private = quote!(#krate::__private);
    let fn_name = sig.ident.to_string();
    let (outer, inner): (Vec<Attribute>, Vec<Attribute>) = attrs
        .into_iter()
        .partition(|attr| matches!(attr.style, AttrStyle::Outer));

    let shape = classify(&sig.output);
    // `contended = "error"` keeps the declared type (it is a `Result`: see
    // `contended_error_without_result`).
    let contended_error = settings.contended_error().is_some();
    let mut new_sig = sig.clone();
    if !contended_error {
        let arrow = match &sig.output {
            ReturnType::Type(arrow, _) => *arrow,
            ReturnType::Default => Token![->](sig.paren_token.span.join()),
        };
        new_sig.output = ReturnType::Type(
            arrow,
            Box::new(rewritten_output(&sig.output, &shape, krate)),
        );
    }

    // Generated locals resolve at the macro's definition site, so they can
    // neither shadow nor be shadowed by the user's names.
    let def = Span::mixed_site();
    let lock = Ident::new("__lock", def);
    let work = Ident::new("__lock_work", def);
    let error = Ident::new("__lock_error", def);
    let out = Ident::new("__lock_out", def);
    let ttl_const = format_ident!("__LOCK_TTL", span = def);
    let wait_const = format_ident!("__LOCK_WAIT", span = def);
    let options_const = format_ident!("__LOCK_OPTIONS", span = def);

    let ttl = duration_tokens(settings.ttl);
    let wait = duration_tokens(settings.wait);
    let manager = match &settings.manager {
        Some(manager) => quote!(::core::option::Option::Some(#manager)),
        None => quote!(::core::option::Option::None),
    };
    let (template, literal_name) = declared_name(&settings.name, &fn_name);
    let options = options_tokens(settings, &template, krate);
    let version = format_ident!(
        "LOCK_MACROS_{}_{}",
        env!("CARGO_PKG_VERSION_MAJOR"),
        env!("CARGO_PKG_VERSION_MINOR")
    );
    let name = name_tokens(&settings.name, &fn_name, errors);

    let body_ty = body_type(&sig.output);
    // Spanned at the error type (or the alias), so a missing
    // `From<lock_core::Error>` is reported there, in FromLockError's words.
    let convert = match (&shape, &sig.output) {
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
    };
    let run = match shape {
        Output::Plain => quote! {
            #private::run_plain(#lock, #work).await
        },
        Output::TwoArgs { .. } | Output::OneArg => {
            let runner = if contended_error {
                quote!(#private::run_or_contended)
            } else {
                quote!(#private::run)
            };
            quote! {
                match #runner(#lock, #work).await {
                    ::core::result::Result::Ok(#out) => ::core::result::Result::Ok(#out),
                    ::core::result::Result::Err(#private::Failure::Work(#error)) => {
                        ::core::result::Result::Err(#error)
                    }
                    ::core::result::Result::Err(#private::Failure::Lock(#error)) => {
                        ::core::result::Result::Err(#convert)
                    }
                }
            }
        }
    };
    let stmts = &block.stmts;

    let mut body = TokenStream::new();
    block.brace_token.surround(&mut body, |tokens| {
        tokens.extend(quote! {
            #(#inner)*
            #private::inventory::submit! {
                #private::declare(
                    #template,
                    #literal_name,
                    ::core::concat!(::core::module_path!(), "::", #fn_name),
                    #ttl,
                    #wait,
                    #manager,
                    #options,
                    ::core::file!(),
                    ::core::line!(),
                )
            }
            const #ttl_const: ::core::time::Duration = #ttl;
            const #wait_const: ::core::time::Duration = #wait;
            const #options_const: #krate::LockOptions = #options;
            // Fails to compile against a lock-core whose `__private` this
            // version of the attribute was not written for.
            const _: () = #private::#version;
            let #lock = #private::lock(#manager, #name, #ttl_const, #wait_const, #options_const);
            let #work = async move {
                // The fake return edge: tells type inference what the body
                // returns before it reads the body, so `?` and `return` in it
                // are checked against the declared type.
                if false {
                    return #private::fake_return::<#body_ty>();
                }
                #(#stmts)*
            };
            #run
        });
    });

    // The attribute is given the function alone, and a method with a body
    // reads the same in a trait impl, a trait and an inherent impl; this
    // companion const is what refuses the first two. A trait impl allows
    // only the trait's items, so there it is an error that names the fix.
    // Its visibility is refused in a trait definition and a trait impl
    // alike (trait items share the trait's), which is what refuses
    // #[locked] on a trait's provided method; spanned at the attribute, so
    // that error shows `#[locked(..)]` and says it comes from it (the
    // method's name shows no visibility to remove). In modules, blocks and
    // inherent impls it is an unused, hidden, crate-visible const.
    let companion = format_ident!(
        "locked_cannot_go_in_a_trait__lock_an_inherent_method_and_call_it_from_the_trait__{}",
        sig.ident,
        span = sig.ident.span()
    );
    let cfgs = outer.iter().filter(|attr| attr.path().is_ident("cfg"));
    quote! {
        #(#cfgs)*
        #[doc(hidden)]
        #[allow(non_upper_case_globals, dead_code)]
        pub(crate) const #companion: () = ();
        #(#outer)*
        #vis #new_sig #body
    }
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

    // Constants must be exact and const-evaluable; pick the simplest constructor.
    #[test]
    fn durations_are_emitted_as_exact_constants() {
        assert_eq!(
            duration_tokens(Duration::from_secs(600)).to_string(),
            quote!(::core::time::Duration::from_secs(600u64)).to_string(),
            "whole seconds"
        );
        assert_eq!(
            duration_tokens(Duration::from_millis(250)).to_string(),
            quote!(::core::time::Duration::from_nanos(250000000u64)).to_string(),
            "sub-second"
        );
        assert_eq!(
            duration_tokens(Duration::new(u64::MAX, 1)).to_string(),
            quote!(::core::time::Duration::new(18446744073709551615u64, 1u32)).to_string(),
            "beyond u64 nanoseconds"
        );
    }

    // A renamed dependency has no `::lock_core`: with `crate = ".."` the
    // expansion must not mention it anywhere.
    #[test]
    fn the_crate_key_replaces_every_path_to_lock_core() {
        let tokens = locked(
            quote!(ttl = "1s", crate = "my_locks"),
            quote!(
                async fn f() -> Result<u8, E> {
                    Ok(1)
                }
            ),
        )
        .to_string();
        assert!(
            !tokens.contains("lock_core"),
            "no default path left: {tokens}"
        );
        assert!(
            tokens.contains("my_locks :: __private :: lock"),
            "the given path is used: {tokens}"
        );
        assert!(!tokens.contains("compile_error"), "no errors: {tokens}");
    }

    // On a function it cannot wrap, the attribute must leave the function as
    // written (so the crate still type-checks) and add exactly its error.
    #[test]
    fn a_function_that_is_not_async_is_emitted_unchanged_next_to_the_error() {
        let function = quote!(
            fn f() -> u8 {
                1
            }
        );
        let tokens = locked(quote!(ttl = "1s"), function.clone()).to_string();
        assert!(
            tokens.starts_with(":: core :: compile_error !"),
            "the error comes first: {tokens}"
        );
        assert!(
            tokens.ends_with(&function.to_string()),
            "then the function, unchanged: {tokens}"
        );
    }

    // Braces in literal text must be escaped again for `format!`, or a name
    // like "{{x}}:{id}" would not compile.
    #[test]
    fn a_template_with_placeholders_formats_its_text_escaped() {
        let mut errors = Errors::default();
        let literal: LitStr = syn::parse_quote!("{{x}}:{id}");
        let pieces = template::parse(&literal.value()).expect("valid template");
        let tokens = name_tokens(&Name::Template { literal, pieces }, "f", &mut errors);
        assert!(errors.is_empty(), "no errors: {:?}", errors.messages());
        assert_eq!(
            tokens.to_string(),
            quote!(::std::format!("{{x}}:{}", id)).to_string(),
            "escaped text, one {{}} per placeholder"
        );
    }

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
