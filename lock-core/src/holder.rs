//! [`Holder`]: who holds a lock, as read back from its store.

use std::time::Duration;

use crate::token;

/// Who holds a lock, as read from its store.
///
/// Returned by [`Lock::holder`](crate::Lock::holder). The remaining TTL is the
/// store's own view at the moment of the read.
#[derive(Clone, PartialEq, Eq)]
pub struct Holder {
    token: String,
    remaining: Duration,
    fence: Option<u64>,
    reader: bool,
}

impl Holder {
    /// A holder from the raw token a store keeps and the lease's remaining TTL.
    ///
    /// Store implementations build this in [`LockStore::holder`](crate::LockStore::holder).
    pub fn new(token: impl Into<String>, remaining: Duration) -> Self {
        Holder {
            token: token.into(),
            remaining,
            fence: None,
            reader: false,
        }
    }

    /// The same holder, holding the read side of its name
    /// ([`Lock::read`](crate::Lock::read)): one of any number of readers.
    ///
    /// For stores that keep readers, in [`LockStore::holder`](crate::LockStore::holder)
    /// and [`LockStore::list`](crate::LockStore::list).
    #[must_use = "as_reader returns a new holder and leaves this one unchanged"]
    pub fn as_reader(self) -> Self {
        Holder {
            reader: true,
            ..self
        }
    }

    /// Whether this holder is a reader, one of any number holding the name
    /// together; false for the writer (a plain lock's holder).
    pub fn is_reader(&self) -> bool {
        self.reader
    }

    /// The same holder, whose acquisition was given the fencing token `fence`.
    ///
    /// For stores that keep each lease's fencing token beside it (memory,
    /// etcd); stores that keep only a counter per name leave it out.
    #[must_use = "with_fence returns a new holder and leaves this one unchanged"]
    pub fn with_fence(self, fence: u64) -> Self {
        Holder {
            fence: Some(fence),
            ..self
        }
    }

    /// The readable part of the token: `host:pid` for tokens this crate
    /// made, the whole value for anything else.
    pub fn owner(&self) -> &str {
        token::owner_of(&self.token)
    }

    /// The full owner token, as [`LockGuard::token`](crate::LockGuard::token) returns it to the holder.
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

    /// The holder's fencing token, when its store can tell it:
    ///
    /// - memory: for a holder that asked for one
    ///   ([`Lock::fenced`](crate::Lock::fenced));
    /// - etcd: always, since there the token is the revision the acquire
    ///   committed at (what a fenced holder was given);
    /// - Redis: for an election's leader only (its term), named in the
    ///   election's `{...}:elected` key; other holders' tokens are not kept
    ///   beside their lease, only the name's counter, so `None`;
    /// - PostgreSQL: for a writer of a fenced name, the name's last fencing
    ///   token (the writer's own when the name is only ever taken fenced, as
    ///   an election's is);
    /// - memcached: never (it keeps no fencing tokens).
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }
}

impl std::fmt::Debug for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token proves ownership: show who, not the proof.
        f.debug_struct("Holder")
            .field("owner", &self.owner())
            .field("remaining_ttl", &self.remaining)
            .field("fence", &self.fence)
            .field("reader", &self.reader)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_shows_the_readable_owner_and_hides_the_token_from_debug() {
        let token = token::new_token();
        let holder = Holder::new(&*token, Duration::from_secs(3));
        assert_eq!(holder.owner(), token::description_of_this_process());
        assert_eq!(holder.token(), &*token);
        let debug = format!("{holder:?}");
        assert!(
            !debug.contains(&token[..32]),
            "Debug must not print the token: {debug}"
        );
    }

    #[test]
    fn a_foreign_value_is_shown_whole() {
        let holder = Holder::new("someone-else", Duration::from_secs(1));
        assert_eq!(holder.owner(), "someone-else");
    }
}
