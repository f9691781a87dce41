//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, with the
//! `metrics` feature.
//!
//! lock-core records; the application decides where to: install a recorder
//! (a Prometheus exporter, say) at startup, and optionally call
//! [`describe`] after it to give each metric its unit and description.
//! Without a recorder every update is a thread-local read, an atomic load
//! and a call into the facade's no-op recorder.
//!
//! | metric | kind | labels | what |
//! |---|---|---|---|
//! | `lock_acquisitions_total` | counter | `lock`, `store`, `outcome` | acquisitions by outcome: `acquired`, `contended` (held by somebody else for the whole wait), `error` |
//! | `lock_acquire_wait_seconds` | histogram | `lock`, `store`, `outcome` | from the call to its outcome, waiting included |
//! | `lock_hold_seconds` | histogram | `lock`, `store` | from acquisition until the guard is released, kept or dropped |
//! | `lock_held` | gauge | `lock`, `store` | leases this process holds right now |
//! | `lock_renewals_total` | counter | `lock`, `store` | successful renewals of running work's lease |
//! | `lock_lost_total` | counter | `lock`, `store` | leases lost while their work ran |
//! | `lock_overruns_total` | counter | `lock`, `store` | releases that found the lease already gone (the work outlived its TTL) |
//! | `lock_release_failures_total` | counter | `lock`, `store` | releases the store failed (tried again in the background until the store answers or the TTL passes) |
//!
//! `lock` is the lock's declared name *template* (`reports:{tenant}`, never
//! the rendered `reports:acme`, so the number of series stays bounded) for
//! `#[locked]` functions, the label given with
//! [`Lock::label`](crate::Lock::label) for runtime locks, and `unlabelled`
//! otherwise. `store` is [`LockStore::name`](crate::LockStore::name).

// The hooks come from one of two twins with the same signatures: `real`,
// with the feature, or `noop`, whose hooks do nothing (the module is then
// private). Callers record unconditionally, and without the feature the
// calls compile away.

#[cfg(not(feature = "metrics"))]
mod noop;
#[cfg(feature = "metrics")]
mod real;

#[cfg(not(feature = "metrics"))]
use noop as hooks;
#[cfg(feature = "metrics")]
use real as hooks;

pub(crate) use hooks::{Labels, acquisition, let_go, lost, released, renewed, taken};
#[cfg(feature = "metrics")]
pub use real::{UNLABELLED, describe};

use tokio::time::Instant;

// The signatures both twins give every hook: each build checks the twin it
// compiles, so the two cannot drift apart.
const _: fn(Option<&'static str>, &'static str) -> Labels = Labels::of;
const _: fn(Option<&'static str>, &dyn crate::LockStore) -> Labels = Labels::of_store;
const _: fn(Labels, Option<bool>, Instant) = acquisition;
const _: fn(Labels) = taken;
const _: fn(Labels, Instant) = let_go;
const _: fn(Labels, &crate::Result<bool>) = released;
const _: fn(Labels) = renewed;
const _: fn(Labels) = lost;
