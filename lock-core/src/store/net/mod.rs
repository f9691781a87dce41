//! What every networked store needs, written once: a time bound on every
//! call ([`deadline`]), the process-local registry of waiters that release
//! notifications wake ([`waiters`]), and the growing pause between reconnect
//! attempts ([`backoff`]).
//!
//! A new store uses these instead of its own copies, so the edges fixed here
//! (one deadline per call, retries included; no missed wake-up; no tight
//! reconnect loop) are fixed for it too.

#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
pub(crate) mod backoff;
pub(crate) mod deadline;
pub(crate) mod waiters;
