//! [`StoredToken`]: an owner token as the memory store keeps it.

use crate::token;

/// An owner token as the store keeps it.
///
/// Tokens this process made end in its own `@host:pid`, so only their random
/// part needs keeping, inline: no allocation per acquire and less memory per
/// held lock. Anything else is kept whole.
#[derive(Clone, PartialEq)]
pub(super) enum StoredToken {
    Own([u8; token::RANDOM_HEX_LEN]),
    Other(Box<str>),
}

impl StoredToken {
    #[inline]
    pub(super) fn new(token: &str) -> StoredToken {
        match token::own_random_part(token) {
            Some(random) => StoredToken::Own(random),
            None => StoredToken::Other(token.into()),
        }
    }

    /// Whether this is `token`, compared whole.
    #[inline]
    pub(super) fn is(&self, token: &str) -> bool {
        match self {
            StoredToken::Own(random) => token::own_random_part(token).as_ref() == Some(random),
            StoredToken::Other(stored) => &**stored == token,
        }
    }

    /// The token as it was given.
    pub(super) fn to_token(&self) -> String {
        match self {
            StoredToken::Own(random) => token::own_token(random),
            StoredToken::Other(stored) => stored.to_string(),
        }
    }
}
