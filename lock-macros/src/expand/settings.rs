//! The checked settings as tokens: durations as `Duration` constants, the
//! `LockOptions` constant, the expression that makes the lock name on each
//! call, and the name as the declared-lock record holds it.

use std::time::Duration;

use proc_macro2::{Ident, Span, TokenStream};
use quote::{ToTokens, quote, quote_spanned};
use syn::{LitStr, Member};

use crate::Errors;
use crate::keys::KEYS;
use crate::template::{self, Piece};
use crate::validate::{Checked, Name, Settings};

/// `duration` as an exact `Duration` constant expression.
pub(super) fn duration_tokens(duration: Duration) -> TokenStream {
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
pub(super) fn options_tokens(
    settings: &Settings,
    template: &TokenStream,
    krate: &syn::Path,
) -> TokenStream {
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
pub(super) fn name_tokens(name: &Name, fn_name: &str, errors: &mut Errors) -> TokenStream {
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
pub(super) fn declared_name(name: &Name, fn_name: &str) -> (TokenStream, TokenStream) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
