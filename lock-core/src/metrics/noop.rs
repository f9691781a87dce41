//! The metrics hooks without the `metrics` feature: the signatures of
//! `real.rs`, each doing nothing, so that callers need no `cfg` and a build
//! without metrics pays nothing for them (not even a clock reading).

use tokio::time::Instant;

use crate::{LockStore, Result};

/// Nothing to label.
#[derive(Clone, Copy)]
pub(crate) struct Labels;

impl Labels {
    #[inline(always)]
    pub(crate) fn of(_lock: Option<&'static str>, _store: &'static str) -> Labels {
        Labels
    }

    #[inline(always)]
    pub(crate) fn of_store(_lock: Option<&'static str>, _store: &dyn LockStore) -> Labels {
        Labels
    }
}

#[inline(always)]
pub(crate) fn acquisition(_labels: Labels, _acquired: Option<bool>, _started: Instant) {}

#[inline(always)]
pub(crate) fn taken(_labels: Labels) {}

#[inline(always)]
pub(crate) fn let_go(_labels: Labels, _started: Instant) {}

#[inline(always)]
pub(crate) fn released(_labels: Labels, _released: &Result<bool>) {}

#[inline(always)]
pub(crate) fn renewed(_labels: Labels) {}

#[inline(always)]
pub(crate) fn lost(_labels: Labels) {}
