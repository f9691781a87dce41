//! Leader election: one leader per name across a fleet, with terms that
//! fence, a signal when leadership ends, and a stream of who leads.
//!
//! An [`Election`] is a fenced, renewed lease on its name. The candidate
//! that holds it leads; the others wait for it by the store's release
//! notifications (as [`Lock::wait_for`](crate::Lock::wait_for) does) and
//! take over the moment it is given back, or when its TTL runs out after
//! its process died.
//!
//! ```text
//! candidate A  campaign ──lease, term 7──> leads: renews every ttl/3 ─── resign / dies
//! candidate B  campaign ──waits (notified, or the TTL)──────────────────> leads, term 8
//! observers    Some(A, 7) ─────────────────────────────────────────────> [None] Some(B, 8)
//! ```
//!
//! # The guarantee, stated honestly
//!
//! Leadership is a lease, not a mutex: a leader that stalls past its TTL
//! (a long pause, a partition) can still be running when the next one
//! takes over. Two things narrow and close that window:
//!
//! - [`Leadership::lost`] resolves no later than the lease's local deadline
//!   (the TTL counted from just before the last renewal was sent, less the
//!   store's clock margin), before the store could let anyone else lead.
//!   [`Election::lead`] drops the work at that moment; a process resumed
//!   after a pause finds `lost()` already resolved before its work is polled
//!   again.
//! - [`Leadership::term`] is a fencing token, strictly greater for each new
//!   leader: a resource that keeps the highest term it has seen and refuses
//!   lower ones refuses a stale leader's writes, whatever its timing.
//!
//! The store decides who leads; the stores that keep fencing tokens
//! (memory, Redis, PostgreSQL, etcd) hold elections. Memcached, which may
//! evict any key (a counter included), cannot keep terms and refuses them.

mod leader;
mod leadership;
mod observe;
mod term;

use std::fmt;
use std::future::Future;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

pub use self::leader::Leader;
use self::leadership::Kept;
pub use self::leadership::Leadership;
pub use self::observe::Observe;
pub use self::term::Term;

use crate::acquire::{self, Outcome};
use crate::metrics::Labels;
use crate::store::kit::{Backoff, Waiters};
use crate::{Error, Lock, LockManager, Result, token};

/// The longest label an election accepts, in bytes.
const MAX_LABEL: usize = 256;

/// An election on one name: who leads it, and how to campaign for it.
///
/// Built by [`LockManager::election`]. Cheap to clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::LockManager;
///
/// let locks = LockManager::memory();
/// let election = locks.election("scheduler", Duration::from_secs(15)).label("10.0.0.5:8080");
/// let leadership = election.campaign().await?;
/// let leader = election.leader().await?.expect("somebody leads");
/// assert_eq!(leader.label(), "10.0.0.5:8080");
/// assert_eq!(leader.term(), leadership.term());
/// leadership.resign().await?;
/// assert!(election.leader().await?.is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "an Election does nothing until you campaign, lead or observe"]
pub struct Election {
    /// The name's lease: fenced, renewed, waited for without bound.
    lock: Lock,
    /// What observers see of this candidate; `host:pid` unless set.
    label: Arc<str>,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Election")
            .field("key", &self.lock.key())
            .field("ttl", &self.lock.ttl())
            .field("label", &self.label)
            .finish()
    }
}

// Here rather than in manager.rs, as `LockManager::lock` is in lock.rs: the
// manager's module stays below the things it builds.
impl LockManager {
    /// The election named `name`: its leader holds a lease of `ttl` on the
    /// name, renewed every `ttl / 3` while it leads.
    ///
    /// The TTL bounds how long a leader that died unannounced (killed, cut
    /// off) keeps the others waiting; a leader that resigns hands over at
    /// once. A process about to exit should [`resign`](Leadership::resign)
    /// (or let [`lead`](Election::lead)'s work return) before its runtime
    /// stops: a dropped leadership is given back by a background task,
    /// which a runtime shutting down may never run, and the next leader
    /// then waits out the TTL. The name shares the namespace of locks:
    /// `locks inspect NAME` shows the leader's lease.
    pub fn election(&self, name: impl AsRef<str>, ttl: Duration) -> Election {
        Election {
            lock: self
                .lock(name, ttl)
                .fenced()
                .renew()
                .wait_for(Duration::MAX),
            label: Arc::from(token::description_of_this_process()),
        }
    }
}

impl Election {
    /// The same election, in which this candidate shows as `label`: what
    /// [`Leader::label`] says while it leads, say `"10.0.0.5:8080"`, the
    /// address the others should talk to. The default is `host:pid`.
    ///
    /// A label that is empty, longer than 256 bytes or holds a control
    /// character makes [`campaign`](Election::campaign) fail with
    /// [`Error::InvalidOptions`].
    pub fn label(mut self, label: impl AsRef<str>) -> Self {
        self.label = Arc::from(label.as_ref());
        self
    }

    /// The election's name, as given.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The store key of the leader's lease (the manager's prefix, then the
    /// name).
    pub fn key(&self) -> &str {
        self.lock.key()
    }

    /// How long a leader's lease lasts unless renewed.
    pub fn ttl(&self) -> Duration {
        self.lock.ttl()
    }

    /// Waits until this candidate leads, and returns its [`Leadership`].
    ///
    /// The wait has no bound. It does not poll: the candidate wakes when
    /// the leader gives the lease back (from any process, on stores that
    /// notify: memory, Redis, PostgreSQL, etcd) or when the leader's TTL
    /// runs out, and tries again. Dropping this future leaves nothing
    /// behind: a lease it took as it was dropped is given back.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidName`], [`Error::InvalidTtl`], as for a lock;
    /// - [`Error::InvalidOptions`] for a label that cannot be shown;
    /// - [`Error::Unsupported`] on a store that keeps no fencing tokens
    ///   (memcached): an election's term is one;
    /// - [`Error::Store`] when the store fails (the campaign stops; run it
    ///   again, or use [`lead`](Election::lead), which does).
    pub async fn campaign(&self) -> Result<Leadership> {
        Ok(self.campaign_kept().await?.0)
    }

    /// [`campaign`](Election::campaign), with the term's renewal task,
    /// which ends once the term's lease has been given back.
    async fn campaign_kept(&self) -> Result<(Leadership, Kept)> {
        self.check()?;
        let target = &self.lock.target;
        let store = target.manager.store();
        let labels = Labels::of_store(target.options.label, &**store);
        loop {
            // Made for each attempt that may take the lease (the acquire
            // waits once at most), never once for the whole campaign: a
            // standby that waited hours and then took over must not show
            // as leading for hours.
            let since = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            let token = token::new_token_described(&leader::described(&self.label, since));
            match acquire::acquire_as(target, labels, Instant::now(), token, true).await? {
                Outcome::Acquired(guard) => {
                    let started = Leadership::start(target.clone(), guard)?;
                    announce(&**store, target.key.as_ref());
                    return Ok(started);
                }
                // The wait is over (a release, the leader's TTL): try
                // again, under a token made now.
                Outcome::Contended(_) => continue,
            }
        }
    }

    /// Leads, runs `work` while leading, and returns what it returns.
    ///
    /// Campaigns; once this candidate leads, calls `work` with a [`Term`]:
    /// the term's number, to fence what the work writes, and a signal when
    /// it ends. `lead` keeps the term's [`Leadership`] itself, so the work
    /// may use the `Term`, clone it into tasks it spawns, or ignore it:
    /// dropping it ends nothing. The moment leadership is lost the work's
    /// future is dropped and the candidate campaigns again, calling `work`
    /// anew for its next term. When the work returns, `lead` resigns
    /// (the next candidate leads at once) and returns the work's result;
    /// a resignation the store did not answer is logged at WARN and tried
    /// again in the background, never returned in place of the result.
    ///
    /// To stop leading, make the work return: before a process exits, this
    /// hands over at once. Dropping the `lead` future also resigns, but
    /// through a background task that a runtime shutting down may never
    /// run (the next leader then waits out the TTL).
    ///
    /// A store that fails while campaigning is retried with growing pauses
    /// (logged at WARN): a leader-elected service rides out a store outage
    /// rather than stop. Errors that retrying cannot mend (a bad name, TTL
    /// or label, a store that cannot hold elections) are returned, converted
    /// with `From`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::LockManager;
    ///
    /// let locks = LockManager::memory();
    /// let election = locks.election("compactor", Duration::from_secs(15));
    /// // Runs only while this instance leads; `term.number()` fences what
    /// // it writes.
    /// let compacted = election
    ///     .lead(|term| async move { compact(term.number()).await })
    ///     .await?;
    /// assert_eq!(compacted, 3);
    /// // Work that needs no term ignores it, and runs all the same.
    /// let swept = election.lead(|_term| async move { sweep().await }).await?;
    /// assert_eq!(swept, 5);
    /// # Ok(()) }
    /// # async fn compact(_term: u64) -> lock_core::Result<u32> { Ok(3) }
    /// # async fn sweep() -> lock_core::Result<u32> { Ok(5) }
    /// ```
    pub async fn lead<T, E, F, W>(&self, mut work: F) -> Result<T, E>
    where
        F: FnMut(Term) -> W,
        W: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let mut backoff = campaign_backoff();
        loop {
            // Held here, never by the work: the work's `Term` can be
            // dropped, ignored or outlive the work without ending the term.
            let (leadership, kept) = match self.campaign_kept().await {
                Ok(started) => started,
                Err(error @ Error::Store { .. }) => {
                    tracing::warn!(key = %self.key(), error = %error.chain(), "could not campaign; trying again");
                    tokio::time::sleep(backoff.next_pause()).await;
                    continue;
                }
                Err(error) => return Err(E::from(error)),
            };
            backoff = campaign_backoff();
            let term = Term::new(leadership.term(), leadership.lease());
            let number = term.number();
            // Boxed: the work is held in one place however large it is.
            let running = Box::pin(work(term));
            tokio::select! {
                biased;
                () = leadership.lost() => {
                    // The renewal task gives the lost lease back on its
                    // own: campaigning again need not wait for it.
                    tracing::warn!(key = %self.key(), term = number, "leadership ended: the work was dropped; campaigning again");
                }
                outcome = running => {
                    // The work's own result, whatever the store says: a
                    // resignation that failed is tried again in the
                    // background and only logged here.
                    if let Err(error) = leadership.resign().await {
                        tracing::warn!(key = %self.key(), term = number, error = %error.chain(), "could not resign as the work returned; trying again in the background");
                    }
                    // Observers in this process are told before this
                    // returns.
                    let _ = kept.await;
                    return outcome;
                }
            }
        }
    }

    /// Who leads now, as the store says: `None` when nobody does.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when the store fails.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        self.lock.validate_name()?;
        let holder = self.lock.holder().await?;
        Ok(holder.as_ref().and_then(Leader::of))
    }

    /// Every change of leader, in order: `Some` for each new term, `None`
    /// when nobody leads.
    ///
    /// The first item is who leads when the stream is first polled. After
    /// that, each change is read from the store when the store announces
    /// one (memory: this process's elections; Redis, PostgreSQL, etcd: any
    /// process's), and when the leader's lease runs out unrenewed (its
    /// holder died), never by polling on those stores. On a store that
    /// announces nothing across processes (memcached) it reads every
    /// second. A read that finds nobody leading is made once more a third
    /// of the TTL later (a second at most): should it have missed a live
    /// leader, that leader is shown again, its term after the `None`.
    /// Otherwise terms only grow: a read older than one already shown is
    /// skipped. A leadership that starts and ends between two reads (within
    /// one round trip) shows only as a jump in term.
    ///
    /// A store that fails is read again with growing pauses (logged at
    /// WARN); the stream never ends.
    pub fn observe(&self) -> Observe {
        Observe::new(self.lock.clone())
    }

    /// Checks what the store and the label allow before campaigning.
    fn check(&self) -> Result<()> {
        let store = self.lock.target.manager.store();
        if !store.fencing() {
            return Err(Error::Unsupported {
                store: store.name(),
                operation: "hold elections",
                hint: "an election's term is a fencing token, and this store keeps none; \
                       use memory, Redis, PostgreSQL or etcd",
            });
        }
        let label = &*self.label;
        if label.is_empty() || label.len() > MAX_LABEL || label.chars().any(char::is_control) {
            return Err(Error::InvalidOptions {
                key: self.key().to_owned(),
                reason: format!(
                    "the election label {label:?} cannot be shown: give 1 to {MAX_LABEL} bytes \
                     of printable text, such as \"10.0.0.5:8080\""
                ),
            });
        }
        Ok(())
    }
}

/// The pauses between campaigns that the store failed: from 100 ms,
/// doubling up to 5 s.
fn campaign_backoff() -> Backoff {
    Backoff::new(
        Duration::from_millis(100),
        Duration::from_secs(5),
        Duration::MAX,
    )
}

/// This process's observers, by store and key: an election in this process
/// that starts or ends a term wakes them at once, whatever the store
/// announces across processes (the memory store announces nothing else).
static LOCAL: LazyLock<Arc<Waiters>> = LazyLock::new(Arc::default);

/// The key `key` of `store` in [`LOCAL`]: a store by address, as re-entry
/// tells stores apart.
fn local_key(store: &dyn crate::LockStore, key: &str) -> String {
    let address = std::ptr::from_ref(store).cast::<()>() as usize;
    format!("{address:x}/{key}")
}

/// Tells this process's observers of `key` on `store` that its leader
/// changed.
fn announce(store: &dyn crate::LockStore, key: &str) {
    LOCAL.changed(&local_key(store, key));
}
