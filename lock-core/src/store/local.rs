//! The crate-private slot of an acquire request: what only an in-process store reads.
//!
//! [`AcquireRequest`](super::AcquireRequest) is public and shared by every
//! store. Two things [`Lock`](crate::Lock) tells the memory store mean
//! nothing to a networked one, so they ride in one private field,
//! [`Local`], instead of widening the public type: the key as an
//! `Arc<str>` (kept without a copy) and leave to hand the lease straight to
//! this waiter (reported by the wakeup as [`Woken::Granted`](super::Woken)).
//! A request built outside this crate ([`AcquireRequest::new`](super::AcquireRequest::new))
//! carries the default: nothing shared, no handover.

use std::sync::Arc;

/// What [`Lock`](crate::Lock) tells an in-process store beyond the public
/// request fields. The default asks for nothing.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Local<'a> {
    /// The request's key, shared: a store that keeps the key (memory) can
    /// hold a reference instead of copying it.
    pub(crate) shared_key: Option<&'a Arc<str>>,
    /// Whether a store that queues its waiters (memory) may hand the lease
    /// straight to this waiter when the holder lets go, instead of waking it
    /// to try again: its wakeup then reports [`Woken::Granted`](super::Woken).
    /// Set by [`Lock`](crate::Lock) for a single-permit wait only, which
    /// holds one wakeup and reads what it reports.
    pub(crate) grant: bool,
}

impl<'a> Local<'a> {
    /// The same, with `key` as the request's key, shared.
    pub(crate) fn with_key(self, key: &'a Arc<str>) -> Self {
        Local {
            shared_key: Some(key),
            ..self
        }
    }
}
