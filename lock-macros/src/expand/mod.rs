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
//!
//! [`target`] says what the attribute was put on and what it refuses,
//! [`output`] handles the return type, [`settings`] turns the checked
//! settings into tokens; this module puts the function together.

mod output;
mod settings;
mod target;

use proc_macro2::{Ident, Span, TokenStream};
use quote::{format_ident, quote};
use syn::{AttrStyle, Attribute, ItemFn, ReturnType, Token};

use crate::Errors;
use crate::args::Args;
use crate::validate::Settings;
use output::{Output, body_type, classify, lock_error_conversion, rewritten_output};
use settings::{declared_name, duration_tokens, name_tokens, options_tokens};
use target::{
    Target, contended_error_without_result, entry_point_without_contended_error, shape_error,
};

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
    let convert = lock_error_conversion(&shape, &sig, &private, &error);
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

    // The mode is one field of the options constant, which both the call and
    // the declared-lock record use: `read` must reach it as `read: true`,
    // and a plain lock must leave it to the default.
    #[test]
    fn the_read_flag_reaches_the_options_constant() {
        let function = quote!(
            async fn f() {}
        );
        let tokens = locked(quote!(ttl = "1s", read), function.clone()).to_string();
        assert!(!tokens.contains("compile_error"), "no errors: {tokens}");
        assert!(
            tokens.contains("read : true ,"),
            "the options say read: {tokens}"
        );
        let tokens = locked(quote!(ttl = "1s"), function).to_string();
        assert!(
            !tokens.contains("read :"),
            "a plain lock keeps the default: {tokens}"
        );
    }
}
