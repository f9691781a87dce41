//! [`Lock`]: a named lease, not yet held, and how to take it.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::acquire::{self, Outcome, Target};
use crate::key::{is_permit_key, joined};
use crate::lease::{Side, held_by_this_task};
use crate::metrics::{self, Labels};
use crate::store::validate_ttl;
use crate::{
    Error, Holder, LockGuard, LockManager, LockOptions, OnContended, OnLost, Result, supervise,
};

/// A named lock, not yet held: built by [`LockManager::lock`].
///
/// Take it with [`acquire`](Lock::acquire) (and hold the returned guard) or
/// with [`run`](Lock::run) (which releases for you). By default neither waits:
/// when somebody else holds the lock they return `Ok(None)` at once. Use
/// [`wait_for`](Lock::wait_for) to wait for it instead.
///
/// The other builder methods set its [`LockOptions`]: [`renew`](Lock::renew)
/// and [`max_hold`](Lock::max_hold) keep a long job's lease alive (within a
/// cap), [`on_lost`](Lock::on_lost) says what happens to work whose lease is
/// lost, [`at_least`](Lock::at_least) keeps a claim standing after early
/// work, [`fenced`](Lock::fenced) hands out fencing tokens,
/// [`shared`](Lock::shared) refuses per-process stores and
/// [`on_contended`](Lock::on_contended) makes contention an error. Renewal
/// and the lost-lease reaction apply to [`run`](Lock::run) and
/// [`run_or_contended`](Lock::run_or_contended); a bare guard from
/// [`acquire`](Lock::acquire) is extended by hand.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::LockManager;
///
/// let locks = LockManager::memory();
/// let first = locks.lock("import", Duration::from_secs(30)).acquire().await?;
/// assert!(first.is_some());
///
/// // Someone holds it: no wait means an immediate `None`.
/// let second = locks.lock("import", Duration::from_secs(30)).acquire().await?;
/// assert!(second.is_none());
/// # Ok(()) }
/// ```
#[derive(Clone)]
#[must_use = "a Lock does nothing until you call acquire() or run()"]
pub struct Lock {
    /// The manager, key, TTL, wait and options: what taking the lock and
    /// supervising its work read, lent to them whole.
    pub(crate) target: Target,
    /// Where the name starts in the key.
    name_at: usize,
}

impl fmt::Debug for Lock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Target {
            manager,
            key,
            ttl,
            wait,
            options,
        } = &self.target;
        f.debug_struct("Lock")
            .field("manager", manager)
            .field("key", key)
            .field("name_at", &self.name_at)
            .field("ttl", ttl)
            .field("wait", wait)
            .field("options", options)
            .finish()
    }
}

// Defined here, beside what it builds, rather than in manager.rs: a lock
// holds its manager, so the manager's module stays below this one.
impl LockManager {
    /// A lock named `name`, whose lease lasts `ttl` unless released or
    /// extended first. Nothing is acquired yet.
    ///
    /// The name is checked when the lock is used: an empty name, a zero TTL or
    /// a TTL beyond the store's range make [`Lock::acquire`] return an error.
    ///
    /// The lock is bound to its store now: for the manager
    /// [`registry::manager`](crate::registry::manager) returns while
    /// nothing is installed, to the default installed by then, or to none
    /// (every use fails with [`Error::NoManager`]).
    pub fn lock(&self, name: impl AsRef<str>, ttl: Duration) -> Lock {
        Lock::new(self.bound(), name.as_ref(), ttl)
    }
}

impl Lock {
    fn new(manager: LockManager, name: &str, ttl: Duration) -> Lock {
        let key = joined(manager.shared_prefix(), name);
        Lock {
            name_at: manager.prefix().len(),
            target: Target {
                manager,
                key,
                ttl,
                wait: Duration::ZERO,
                options: LockOptions::DEFAULT,
            },
        }
    }

    /// The same lock, waiting up to `wait` for a holder to let go before
    /// giving up with `Ok(None)`.
    ///
    /// A waiter does not poll: it wakes when the lock is released, when the
    /// holder's TTL runs out, or at its deadline, whichever comes first.
    pub fn wait_for(mut self, wait: Duration) -> Self {
        self.target.wait = wait;
        self
    }

    /// The same lock with all of `options` at once (what `#[locked]` uses).
    pub fn with_options(mut self, options: LockOptions) -> Self {
        self.target.options = options;
        self
    }

    /// The same lock, renewed while [`run`](Lock::run)'s work runs: every
    /// `ttl / 3` the lease is extended back to `ttl`, atomically.
    ///
    /// A crashed process stops renewing, so its lease still ends within one
    /// `ttl`; a live but stuck one renews forever unless
    /// [`max_hold`](Lock::max_hold) caps it. A renewal that fails (the store
    /// cannot be reached) is tried again until the lease's local deadline;
    /// past it the lease counts as lost, and [`on_lost`](Lock::on_lost)
    /// says what happens to the work. Without renewal, the lease is known
    /// lost only at that deadline.
    pub fn renew(mut self) -> Self {
        self.target.options.renew = true;
        self
    }

    /// The same lock, renewed for at most `max_hold` in all: renewals never
    /// push the lease past acquisition + `max_hold`, so stuck work cannot hold
    /// the lock forever. Requires [`renew`](Lock::renew).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.target.options.max_hold = Some(max_hold);
        self
    }

    /// The same lock, reacting to a lost lease as `on_lost` says (see [`OnLost`]).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.target.options.on_lost = on_lost;
        self
    }

    /// The same lock, whose claim stands for at least `at_least` after it was
    /// acquired, even when the work ends sooner: instead of deleting the lease,
    /// release shortens it to end at acquisition + `at_least`, and the store's
    /// own expiry ends it. What "run this at most once a minute, fleet-wide"
    /// needs. Must not exceed the TTL.
    pub fn at_least(mut self, at_least: Duration) -> Self {
        self.target.options.at_least = Some(at_least);
        self
    }

    /// The same lock, with a fencing token per acquisition (see
    /// [`LockGuard::fence`]): a number that strictly increases per lock name,
    /// for systems that must reject writes from a stale holder. Only the
    /// order means anything: tokens need not be consecutive (on Redis each
    /// is at least the server's clock in microseconds, so that a restart
    /// that forgets the counter does not start it again below tokens
    /// already handed out). Stores that cannot keep one make acquire fail
    /// with [`Error::FencingUnsupported`].
    pub fn fenced(mut self) -> Self {
        self.target.options.fenced = true;
        self
    }

    /// The same lock, refusing to run on a per-process store: acquire fails
    /// with [`Error::NotShared`] unless the manager [is
    /// shared](LockManager::is_shared). For work that must not run twice
    /// across the fleet, where a forgotten Redis setup would silently give
    /// every process its own lock.
    pub fn shared(mut self) -> Self {
        self.target.options.shared = true;
        self
    }

    /// The former name of [`shared`](Lock::shared).
    #[deprecated(
        since = "0.1.1",
        note = "renamed `shared`, the name the attribute key uses"
    )]
    pub fn require_shared(self) -> Self {
        self.shared()
    }

    /// The same lock, answering contention as `contended` says: with
    /// [`OnContended::Error`], [`acquire`](Lock::acquire) and
    /// [`run`](Lock::run) return [`Error::Contended`] instead of `Ok(None)`.
    pub fn on_contended(mut self, contended: OnContended) -> Self {
        self.target.options.contended = contended;
        self
    }

    /// The same lock admitting `permits` holders at once: a semaphore. 1 is
    /// a plain lock (the default).
    ///
    /// "At most 4 workers call the payment provider at once, across the
    /// fleet": `manager.lock("payments", ttl).permits(4)`. Everything else
    /// stays as for a lock: waiting, `run`, renewal, `max_hold`, `on_lost`,
    /// `at_least`, release on drop. Each permit is a lease of its own under
    /// the key `<key>#permit-<i>` (the first is the lock's own key); an
    /// acquire tries them in a random rotation and takes the first free one,
    /// and a waiter wakes on the release of any of them. So one acquire
    /// costs one store round trip while a permit is free, and up to
    /// `permits` when most are taken. A key of that form belongs to a
    /// semaphore: acquiring a lock whose key ends in `#permit-<n>` is refused
    /// with [`Error::InvalidName`] (reading or force-releasing one, as an
    /// operator freeing one permit does, is not). [`fenced`](Lock::fenced) is refused
    /// with more than one permit: a token orders the holders of one lease,
    /// and a semaphore has several at once. Every process must use the same
    /// count for a name (`registry::verify` checks declared locks).
    pub fn permits(mut self, permits: u32) -> Self {
        self.target.options.permits = permits;
        self
    }

    /// The read side of the same name: any number of readers hold it
    /// together; its plain lock (the write side) excludes readers and
    /// writers alike. Everything else stays as for a lock (waiting, `run`,
    /// renewal, `max_hold`, `on_lost`, `at_least`, release on drop).
    ///
    /// - Writers are never starved: once a writer waits, new readers wait
    ///   behind it.
    /// - Each reader is a lease of its own, with its own token and TTL: a
    ///   dead reader holds writers off until its own TTL, no longer, and
    ///   releasing or extending one reader touches no other lease.
    /// - No upgrade or downgrade: work under one side of a name that asks
    ///   for the other side (through `run`, `#[locked]` or `acquire`) gets
    ///   [`Error::Reentrant`] at once; the same side re-enters as a plain
    ///   lock does (see [`run`](Lock::run)).
    /// - Refused with `permits` above 1 or `fenced` ([`Error::InvalidOptions`]),
    ///   and on a store that keeps no readers ([`Error::ReadUnsupported`]):
    ///   memory, Redis, PostgreSQL and etcd keep readers; memcached does not.
    ///
    /// In one process a release wakes a waiting writer before waiting
    /// readers, and the memory store queues everyone in order. Across
    /// processes, a writer that waits while readers hold the name claims
    /// it, which holds new readers off (each store's docs say how, and for
    /// how long a writer that gives up or dies keeps them off). One gap
    /// remains on Redis, PostgreSQL and etcd: a writer waiting behind
    /// another *writer* makes no claim yet, so readers woken by that
    /// writer's release may go before it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// # let (locks, ttl) = (lock_core::LockManager::memory(), std::time::Duration::from_secs(30));
    /// let first = locks.lock("catalog", ttl).read().acquire().await?.expect("free");
    /// let second = locks.lock("catalog", ttl).read().acquire().await?.expect("readers share");
    /// assert!(first.is_reader() && second.is_reader());
    /// assert!(locks.lock("catalog", ttl).acquire().await?.is_none(), "a writer waits for them");
    /// # Ok(()) }
    /// ```
    pub fn read(mut self) -> Self {
        self.target.options.read = true;
        self
    }

    /// The same lock, named `label` in metrics (the `lock` label, with the
    /// `metrics` feature; `"unlabelled"` when none is given).
    ///
    /// Give the kind of lock, not its instance: `"invoice"`, not
    /// `"invoice:4411"`, or every name becomes a series of its own.
    /// `#[locked]` functions are labelled with their name template.
    pub fn label(mut self, label: &'static str) -> Self {
        self.target.options.label = Some(label);
        self
    }

    /// Takes the lock: `Ok(Some(guard))` when it is ours, `Ok(None)` when
    /// somebody else held it for the whole wait.
    ///
    /// Release the guard with [`LockGuard::release`] when done. A guard
    /// dropped unreleased is released for you (see [`LockGuard`]), and so is
    /// a lease this future took if it is dropped before it returns.
    ///
    /// # Errors
    ///
    /// - [`Error::NoManager`] for a lock from
    ///   [`registry::manager`](crate::registry::manager) while no manager
    ///   is installed;
    /// - [`Error::InvalidName`] for an empty name;
    /// - [`Error::InvalidTtl`] for a zero TTL or one beyond the store's range;
    /// - [`Error::InvalidOptions`] for options that contradict each other
    ///   (`max_hold` without `renew`, `at_least` longer than the TTL);
    /// - [`Error::FencingUnsupported`] for a [`fenced`](Lock::fenced) lock on
    ///   a store that cannot fence;
    /// - [`Error::NotShared`] for a [`shared`](Lock::shared) lock on a
    ///   per-process store;
    /// - [`Error::ReadUnsupported`] for a [`read`](Lock::read) lock on a
    ///   store that keeps no readers;
    /// - [`Error::Contended`] when somebody else held it and the lock was set
    ///   to [`OnContended::Error`];
    /// - [`Error::Store`] when the store fails, or answers only after the
    ///   lease it took has run out (its local deadline, counted from just
    ///   before the request was sent, has passed): no guard for a lease
    ///   that may already be someone else's; the lease is given back.
    pub async fn acquire(&self) -> Result<Option<LockGuard>> {
        if self.held_here().is_some() {
            return Err(self.reentrant());
        }
        match self.acquire_outcome().await? {
            Outcome::Acquired(guard) => Ok(Some(guard)),
            Outcome::Contended(remaining) => match self.target.options.contended {
                OnContended::Error => Err(self.contended(remaining).await),
                _ => Ok(None),
            },
        }
    }

    /// Takes the lock, waiting as long as `wait` says; the outcome counted
    /// and timed.
    pub(crate) async fn acquire_outcome(&self) -> Result<Outcome> {
        let started = Instant::now();
        let labels = Labels::of_store(self.target.options.label, &**self.target.manager.store());
        // `if let`, not `match`: its scrutinee is dropped before the `else`,
        // so the future does not keep room for an error across the await.
        let outcome = if let Err(error) = self.validate() {
            Err(error)
        } else {
            acquire::acquire(&self.target, labels, started).await
        };
        let acquired = match &outcome {
            Ok(Outcome::Acquired(_)) => Some(true),
            Ok(Outcome::Contended(_)) => Some(false),
            Err(_) => None,
        };
        metrics::acquisition(labels, acquired, started);
        outcome
    }

    /// Runs `work` while holding the lock, then releases it.
    ///
    /// - `Ok(Some(value))`: the lock was ours and the work returned `Ok(value)`.
    /// - `Ok(None)`: somebody else held it (for the whole wait); the work was
    ///   not run.
    /// - `Err(e)`: the work's own error, or a lock error converted with `From`
    ///   (those [`acquire`](Lock::acquire) lists, and [`Error::LeaseLost`]
    ///   when the lease is lost under [`OnLost::Cancel`]).
    ///
    /// The work's result always wins: when the work fails, its error is
    /// returned even if the release fails too, and a release failure after
    /// successful work is logged at WARN rather than turned into an error
    /// (the give-back is then tried again in the background until the store
    /// answers or the lease's TTL passes). If the work panics or this future is
    /// dropped mid-way, the lease is given back all the same.
    ///
    /// The work is boxed once, when `run` is called, so this future stays
    /// small however large the work's own future is.
    ///
    /// # Re-entry
    ///
    /// Called from work that already runs under this lock (the same name on
    /// the same manager: a `#[locked]` function calling itself, or another
    /// locked on that name), `run` never waits for itself: the work runs
    /// at once under the lease already held, taking and giving back
    /// nothing, and its value comes back as `Ok(Some(value))`. The outer
    /// lease's options (renewal, `on_lost`) keep governing it. This holds
    /// across `.await` points; a task spawned from the work is another
    /// holder and waits like anyone else. [`acquire`](Lock::acquire), whose
    /// guard would be a second lease, returns [`Error::Reentrant`] there.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::LockManager;
    ///
    /// let locks = LockManager::memory();
    /// let total = locks
    ///     .lock("sum", Duration::from_secs(5))
    ///     .run(async { Ok::<_, lock_core::Error>(1 + 2) })
    ///     .await?;
    /// assert_eq!(total, Some(3));
    /// # Ok(()) }
    /// ```
    pub fn run<T, E, F>(&self, work: F) -> impl Future<Output = Result<Option<T>, E>>
    where
        F: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        // Boxed at once, before the returned future exists: the work is held
        // in one place for the whole call, so this future is the work's
        // pointer plus the lock's own small state, however large the work.
        self.run_unpin(Box::pin(work))
    }

    /// [`run`](Lock::run) for work that is already boxed (or otherwise
    /// small and `Unpin`): it is held as it is, never boxed again.
    pub(crate) async fn run_unpin<T, E, W>(&self, work: W) -> Result<Option<T>, E>
    where
        W: Future<Output = Result<T, E>> + Unpin,
        E: From<Error>,
    {
        if let Some(side) = self.held_here() {
            // This task holds the lock already: the work runs under that
            // lease, neither taking nor giving back another; unless it is
            // the other side of the name (see `read`).
            if !self.same_side(side) {
                return Err(E::from(self.reentrant()));
            }
            tracing::debug!(key = %self.target.key, "lock re-entered: the work runs under the lease this task holds");
            return work.await.map(Some);
        }
        match self.acquire_outcome().await? {
            Outcome::Acquired(guard) => supervise::run_held(&self.target, guard, work)
                .await
                .map(Some),
            Outcome::Contended(remaining) => match self.target.options.contended {
                OnContended::Error => Err(E::from(self.contended(remaining).await)),
                _ => Ok(None),
            },
        }
    }

    /// Like [`run`](Lock::run), but for work that must happen, just not twice
    /// at once: contention is an error, [`Error::Contended`], converted with
    /// `From`, and the work's value comes back without an `Option`.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// use std::time::Duration;
    /// use lock_core::{Error, LockManager};
    ///
    /// let locks = LockManager::memory();
    /// let lock = locks.lock("charge:42", Duration::from_secs(30));
    /// let _held = lock.acquire().await.unwrap();
    /// let second = lock.run_or_contended(async { Ok::<_, Error>("charged") }).await;
    /// assert!(matches!(second, Err(Error::Contended { .. })));
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`run`](Lock::run), and [`Error::Contended`] when somebody else
    /// held the lock for the whole wait.
    pub fn run_or_contended<T, E, F>(&self, work: F) -> impl Future<Output = Result<T, E>>
    where
        F: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.run_or_contended_unpin(Box::pin(work))
    }

    /// [`run_or_contended`](Lock::run_or_contended) for work that is already
    /// boxed (or otherwise small and `Unpin`).
    pub(crate) async fn run_or_contended_unpin<T, E, W>(&self, work: W) -> Result<T, E>
    where
        W: Future<Output = Result<T, E>> + Unpin,
        E: From<Error>,
    {
        if let Some(side) = self.held_here() {
            if !self.same_side(side) {
                return Err(E::from(self.reentrant()));
            }
            tracing::debug!(key = %self.target.key, "lock re-entered: the work runs under the lease this task holds");
            return work.await;
        }
        match self.acquire_outcome().await? {
            Outcome::Acquired(guard) => supervise::run_held(&self.target, guard, work).await,
            Outcome::Contended(remaining) => Err(E::from(self.contended(remaining).await)),
        }
    }

    /// The side this task already holds this lock's name on, if it runs
    /// under its lease.
    fn held_here(&self) -> Option<Side> {
        held_by_this_task(self.target.manager.store(), &self.target.key)
    }

    /// Whether `side` is the side this lock asks for: re-entered work runs
    /// under a lease of its own side only (a reader's lease cannot cover a
    /// writer's work, and no upgrade or downgrade is made).
    fn same_side(&self, side: Side) -> bool {
        side.reader == self.target.options.read
    }

    #[cold]
    fn reentrant(&self) -> Error {
        Error::Reentrant {
            key: self.target.key.to_string(),
        }
    }

    /// The store key: the manager's prefix followed by the name.
    pub fn key(&self) -> &str {
        &self.target.key
    }

    /// The lock name, as given.
    pub fn name(&self) -> &str {
        &self.target.key[self.name_at..]
    }

    /// How long a lease lasts unless released or extended first.
    pub fn ttl(&self) -> Duration {
        self.target.ttl
    }

    /// How long [`acquire`](Lock::acquire) waits for a holder to let go.
    pub fn wait(&self) -> Duration {
        self.target.wait
    }

    /// The lock's options.
    pub fn options(&self) -> &LockOptions {
        &self.target.options
    }

    /// The error for contention reported to the caller, with the holder's
    /// remaining TTL. A store that did not say (Redis answers a plain
    /// `SET NX` with a bare "no") is asked once, on this path only.
    async fn contended(&self, remaining: Option<Duration>) -> Error {
        let remaining = match remaining {
            Some(remaining) => Some(remaining),
            None => self
                .holders()
                .await
                .ok()
                .and_then(|holders| holders.iter().map(Holder::remaining_ttl).min()),
        };
        Error::Contended {
            key: self.target.key.to_string(),
            holder_remaining: remaining,
        }
    }

    fn validate(&self) -> Result<()> {
        if self.target.manager.is_unbound() {
            return Err(crate::manager::installed::no_manager(&self.target.key));
        }
        self.validate_name()?;
        if is_permit_key(&self.target.key) {
            return Err(permit_name(self.name()));
        }
        validate_ttl(
            &self.target.key,
            self.target.ttl,
            &**self.target.manager.store(),
        )?;
        self.target
            .options
            .check(&self.target.key, self.target.ttl, &self.target.manager)
    }

    pub(crate) fn validate_name(&self) -> Result<()> {
        if self.name().is_empty() {
            return Err(Error::InvalidName {
                name: String::new(),
                reason: "a lock name must not be empty; name the resource it protects, \
                         for example \"reports:{tenant}\"",
            });
        }
        Ok(())
    }
}

/// Why a lock may not take a name of the form of a permit key: it would be
/// the same lease as a permit of the semaphore named before the suffix, so
/// each would hold the other off, and that semaphore's `force_release`
/// would free it.
#[cold]
#[inline(never)]
fn permit_name(name: &str) -> Error {
    Error::InvalidName {
        name: name.to_owned(),
        reason: "names ending in `#permit-<n>` are the keys of a semaphore's permits \
                 (`Lock::permits`); rename the lock, for example with `_` for `-`",
    }
}
