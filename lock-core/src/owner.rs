//! Owner tokens and the [`Holder`] description read back from a store.
//!
//! A token is what a store keeps as the lease's value, and the only proof of
//! ownership release and extend accept. It is 128 bits from the thread-local
//! ChaCha generator (seeded and periodically reseeded from the operating
//! system), in hex, followed by a readable description of the holder:
//!
//! ```text
//! 3f9c0e0d6b1a4e52a1c7d29e55e0b8f4@web-7:4242
//! └──────────── 128 random bits ─┘ └ host:pid
//! ```
//!
//! The random part makes tokens unguessable and unique across processes and
//! machines; the description lets [`Lock::holder`](crate::Lock::holder) say who
//! holds a lock.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Length of the random part of a token, in hex digits (128 bits).
pub(crate) const RANDOM_HEX_LEN: usize = 32;

/// `host:pid` of this process, computed once.
fn description_of_this_process() -> &'static str {
    static DESCRIPTION: OnceLock<String> = OnceLock::new();
    DESCRIPTION.get_or_init(|| {
        let host = gethostname::gethostname();
        let host = host.to_string_lossy();
        let host = if host.is_empty() {
            "unknown-host"
        } else {
            &host
        };
        format!("{host}:{}", std::process::id())
    })
}

/// A fresh owner token: 128 random bits in hex, `@`, then `host:pid`.
///
/// Hand-encoded rather than through `format!`: this runs on every acquire,
/// and the formatting machinery costs more than the rest of an in-memory
/// acquire.
pub(crate) fn new_token() -> Arc<str> {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits: u128 = rand::random();
    let mut random = [0u8; RANDOM_HEX_LEN];
    for (pair, byte) in random.chunks_exact_mut(2).zip(bits.to_be_bytes()) {
        pair[0] = HEX[usize::from(byte >> 4)];
        pair[1] = HEX[usize::from(byte & 0xf)];
    }
    let description = description_of_this_process();
    // Hex digits are ASCII, so this never falls back to the empty string.
    let random = std::str::from_utf8(&random).unwrap_or_default();
    // Assembled on the stack when it fits, so the only allocation is the
    // shared `Arc<str>` the guard and the running work's lease both hold.
    let mut buffer = [0u8; 160];
    let len = RANDOM_HEX_LEN + 1 + description.len();
    if let Some(out) = buffer.get_mut(..len) {
        out[..RANDOM_HEX_LEN].copy_from_slice(random.as_bytes());
        out[RANDOM_HEX_LEN] = b'@';
        out[RANDOM_HEX_LEN + 1..].copy_from_slice(description.as_bytes());
        if let Ok(token) = std::str::from_utf8(out) {
            return Arc::from(token);
        }
    }
    Arc::from(format!("{random}@{description}"))
}

/// The random part of `token` when this process made it (it ends in this
/// process's own `@host:pid`); `None` for any other token.
pub(crate) fn own_random_part(token: &str) -> Option<[u8; RANDOM_HEX_LEN]> {
    let (random, rest) = token.as_bytes().split_at_checked(RANDOM_HEX_LEN)?;
    let description = rest.strip_prefix(b"@")?;
    if description != description_of_this_process().as_bytes() {
        return None;
    }
    random.try_into().ok()
}

/// The token whose random part is `random` and which this process made: the
/// inverse of [`own_random_part`].
pub(crate) fn own_token(random: &[u8; RANDOM_HEX_LEN]) -> String {
    let description = description_of_this_process();
    let mut token = String::with_capacity(RANDOM_HEX_LEN + 1 + description.len());
    // `own_random_part` only keeps bytes that ended right before an ASCII
    // `@`, so they are whole UTF-8 characters.
    token.push_str(&String::from_utf8_lossy(random));
    token.push('@');
    token.push_str(description);
    token
}

/// Who holds a lock, as read from its store.
///
/// Returned by [`Lock::holder`](crate::Lock::holder). The remaining TTL is the
/// store's own view at the moment of the read.
#[derive(Clone, PartialEq, Eq)]
pub struct Holder {
    token: String,
    remaining: Duration,
}

impl Holder {
    /// A holder from the raw token a store keeps and the lease's remaining TTL.
    ///
    /// Store implementations build this in [`LockStore::holder`](crate::LockStore::holder).
    pub fn new(token: impl Into<String>, remaining: Duration) -> Self {
        Holder {
            token: token.into(),
            remaining,
        }
    }

    /// The readable part of the owner: `host:pid` for tokens this crate made,
    /// the whole value for anything else.
    pub fn owner(&self) -> &str {
        match self.token.split_once('@') {
            Some((random, description)) if random.len() == RANDOM_HEX_LEN => description,
            _ => &self.token,
        }
    }

    /// The full owner token, as [`LockGuard::owner`](crate::LockGuard::owner) returns it to the holder.
    ///
    /// Knowing it lets a caller compare it with its own guard; it is not a
    /// secret from the store's administrators, but it is the only proof of
    /// ownership, so do not publish it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// How long the lease has left before the store lets it go.
    pub fn remaining_ttl(&self) -> Duration {
        self.remaining
    }
}

impl std::fmt::Debug for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token proves ownership: show who, not the proof.
        f.debug_struct("Holder")
            .field("owner", &self.owner())
            .field("remaining_ttl", &self.remaining)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn a_token_carries_128_random_bits_and_says_which_process_made_it() {
        let token = new_token();
        let (random, who) = token.split_once('@').expect("token has an @");
        assert_eq!(random.len(), 32, "128 bits are 32 hex digits: {token}");
        assert!(
            random.bytes().all(|b| b.is_ascii_hexdigit()),
            "random part must be hex: {token}"
        );
        assert!(
            who.ends_with(&format!(":{}", std::process::id())),
            "description must end with our pid: {token}"
        );
    }

    #[test]
    fn tokens_do_not_repeat() {
        let tokens: HashSet<Arc<str>> = (0..10_000).map(|_| new_token()).collect();
        assert_eq!(tokens.len(), 10_000, "every token must be unique");
    }

    #[test]
    fn a_holder_shows_the_readable_owner_and_hides_the_token_from_debug() {
        let token = new_token();
        let holder = Holder::new(&*token, Duration::from_secs(3));
        assert_eq!(holder.owner(), description_of_this_process());
        assert_eq!(holder.token(), &*token);
        let debug = format!("{holder:?}");
        assert!(
            !debug.contains(&token[..32]),
            "Debug must not print the token: {debug}"
        );
    }

    #[test]
    fn an_own_token_round_trips_through_its_random_part() {
        let token = new_token();
        let random = own_random_part(&token).expect("made by this process");
        assert_eq!(own_token(&random), &*token);
        assert_eq!(own_random_part("someone-else"), None);
        let other_process = format!("{}@elsewhere:1", &token[..32]);
        assert_eq!(
            own_random_part(&other_process),
            None,
            "another process's token is not ours"
        );
    }

    #[test]
    fn a_foreign_value_is_shown_whole() {
        let holder = Holder::new("someone-else", Duration::from_secs(1));
        assert_eq!(holder.owner(), "someone-else");
    }
}
