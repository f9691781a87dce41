//! [`LockOptions`]: every option of a lock, in one place.
//!
//! The same type is what the [`Lock`](crate::Lock) builder fills in, what a
//! `#[locked]` function's expansion writes as a constant, and what
//! [`registry::DeclaredLock::options`](crate::registry::DeclaredLock::options)
//! reports, so the attribute, the catalogue of declared locks and the
//! runtime cannot drift apart. Adding an option means a field here (with its
//! default in [`LockOptions::DEFAULT`] and its check in `check`), a builder
//! method on `Lock`, and a row in the attribute's key table.

use std::time::Duration;

use crate::manager::installed;
use crate::{Error, LockManager, Result};

/// What [`Error::NotShared`] says to do, in an application.
pub(crate) const NOT_SHARED: &str = "install a manager over a shared store (such as Redis), or \
     `declared_shared()` if this app truly runs as one process";

/// What [`Error::NotShared`] says to do inside `registry::with_manager`,
/// where a test runs its code on a memory manager.
pub(crate) const NOT_SHARED_IN_OVERRIDE: &str = "this task runs inside \
     `registry::with_manager`, whose manager is per-process; in a test on one process, vouch \
     for it: `registry::with_manager(LockManager::memory().declared_shared(), ..)`";

/// What locked work does when its lease is lost while it runs.
///
/// A lease is lost when a renewal finds it gone (expired, or force-released
/// from outside) or when its local deadline passes without a renewal. Set
/// with [`Lock::on_lost`](crate::Lock::on_lost), or `on_lost = "..."` on
/// `#[locked]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnLost {
    /// Log at ERROR and let the work finish (the default). The work may then
    /// run alongside the next holder.
    #[default]
    Continue,
    /// Drop the work at that moment and return [`Error::LeaseLost`]. How
    /// soon "that moment" comes is as soon as the loss is known: at the next
    /// renewal (every `ttl / 3` with [`Lock::renew`](crate::Lock::renew)),
    /// and at the latest at the lease's local deadline, even while a
    /// renewal is in flight.
    Cancel,
}

/// What taking a lock does when somebody else holds it for the whole wait.
///
/// Set with [`Lock::on_contended`](crate::Lock::on_contended), or
/// `contended = "..."` on `#[locked]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnContended {
    /// `Ok(None)` (the default): [`Lock::acquire`](crate::Lock::acquire) and
    /// [`Lock::run`](crate::Lock::run) say "not ours" without an error, and
    /// a `#[locked]` function's return type is wrapped in `Option`.
    #[default]
    ReturnNone,
    /// [`Error::Contended`]: for work that must happen, just not twice at
    /// once. A `#[locked]` function keeps its declared return type.
    Error,
}

/// The options of a lock, all off by default.
///
/// Built through the [`Lock`](crate::Lock) builder (`.renew()`,
/// `.max_hold(d)`...), or whole, in a constant:
///
/// ```
/// use std::time::Duration;
/// use lock_core::{LockOptions, OnLost};
///
/// const NIGHTLY: LockOptions = LockOptions {
///     renew: true,
///     max_hold: Some(Duration::from_secs(4 * 3600)),
///     on_lost: OnLost::Cancel,
///     ..LockOptions::DEFAULT
/// };
/// # let _ = NIGHTLY;
/// ```
///
/// Contradictions (`max_hold` without `renew`, `at_least` longer than the
/// TTL) are refused with [`Error::InvalidOptions`] when the lock is taken;
/// `#[locked]` refuses them at compile time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOptions {
    /// Extend the lease every `ttl / 3` while [`run`](crate::Lock::run)'s
    /// work runs ([`Lock::renew`](crate::Lock::renew)).
    pub renew: bool,
    /// Never renew past acquisition + this ([`Lock::max_hold`](crate::Lock::max_hold)).
    pub max_hold: Option<Duration>,
    /// What locked work does when its lease is lost.
    pub on_lost: OnLost,
    /// The claim stands until acquisition + this, even when the work ends
    /// sooner ([`Lock::at_least`](crate::Lock::at_least)).
    pub at_least: Option<Duration>,
    /// Hand out fencing tokens ([`Lock::fenced`](crate::Lock::fenced)).
    pub fenced: bool,
    /// Refuse per-process stores ([`Lock::shared`](crate::Lock::shared)).
    pub shared: bool,
    /// What taking the lock does when somebody else holds it.
    pub contended: OnContended,
    /// How many holders the lock admits at once: 1 (the default) is a lock,
    /// more make it a semaphore ([`Lock::permits`](crate::Lock::permits)).
    pub permits: u32,
    /// How metrics name the lock (the `lock` label, with the `metrics`
    /// feature): `#[locked]` sets its name template (`"reports:{tenant}"`),
    /// a runtime lock what [`Lock::label`](crate::Lock::label) gives. Never
    /// the rendered name, so the number of series stays bounded.
    pub label: Option<&'static str>,
    /// Take the name's read side: readers hold it together, a writer (the
    /// plain lock) alone ([`Lock::read`](crate::Lock::read)).
    pub read: bool,
}

impl LockOptions {
    /// Every option off.
    pub const DEFAULT: LockOptions = LockOptions {
        renew: false,
        max_hold: None,
        on_lost: OnLost::Continue,
        at_least: None,
        fenced: false,
        shared: false,
        contended: OnContended::ReturnNone,
        permits: 1,
        label: None,
        read: false,
    };

    /// Refuses options that contradict each other, or that the manager's
    /// store cannot give.
    #[inline]
    pub(crate) fn check(&self, key: &str, ttl: Duration, manager: &LockManager) -> Result<()> {
        let invalid = |reason: String| {
            Err(Error::InvalidOptions {
                key: key.to_owned(),
                reason,
            })
        };
        if self.max_hold.is_some() && !self.renew {
            return invalid(
                "max_hold caps renewal, but the lock does not renew; add renew() or drop max_hold"
                    .to_owned(),
            );
        }
        if let Some(at_least) = self.at_least.filter(|at_least| *at_least > ttl) {
            return invalid(format!(
                "at_least ({at_least:?}) is longer than the ttl ({ttl:?}), so the claim could not \
                 stand that long; raise the ttl to at least {at_least:?}"
            ));
        }
        if self.permits == 0 {
            return invalid(
                "permits(0) admits nobody; give how many may hold the lock at once, at least 1"
                    .to_owned(),
            );
        }
        if self.fenced && self.permits > 1 {
            return invalid(format!(
                "fencing tokens order the holders of one lease, and {} permits are held at once, \
                 so a token could not tell a stale holder from a current one; drop fenced() or \
                 use permits(1)",
                self.permits
            ));
        }
        if self.read {
            self.check_reader(key, manager)?;
        }
        if self.fenced && !manager.store().fencing() {
            return Err(Error::FencingUnsupported {
                key: key.to_owned(),
            });
        }
        if self.shared && !manager.is_shared() {
            return Err(Error::NotShared {
                key: key.to_owned(),
                hint: if installed::in_override() {
                    NOT_SHARED_IN_OVERRIDE
                } else {
                    NOT_SHARED
                },
            });
        }
        Ok(())
    }
}

impl LockOptions {
    /// The checks only a reader needs; out of line, so a plain lock's check
    /// stays small.
    #[cold]
    #[inline(never)]
    fn check_reader(&self, key: &str, manager: &LockManager) -> Result<()> {
        let invalid = |reason: String| {
            Err(Error::InvalidOptions {
                key: key.to_owned(),
                reason,
            })
        };
        if self.permits > 1 {
            return invalid(format!(
                "a read lock is already shared by any number of readers, and {} permits would \
                 make it a semaphore as well; drop permits() or read()",
                self.permits
            ));
        }
        if self.fenced {
            return invalid(
                "fencing tokens order the writers of a name, and readers hold it together, so a \
                 reader's token could not tell a stale holder from a current one; drop fenced() \
                 or read()"
                    .to_owned(),
            );
        }
        if !manager.store().read_mode() {
            return Err(Error::ReadUnsupported {
                key: key.to_owned(),
                store: manager.store().name(),
            });
        }
        Ok(())
    }
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions::DEFAULT
    }
}
