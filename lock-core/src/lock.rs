//! [`Lock`]: a named lease, not yet held, and how to take it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::giveback::{GiveBack, give_back};
use crate::key::{is_permit_key, joined, permit_key};
use crate::lease::{LockId, held_by_this_task, local_deadline};
use crate::metrics::{self, Labels};
use crate::store::{AcquireRequest, Attempt, Wakeup, Woken, store_ttl, validate_ttl};
use crate::{
    Error, Holder, LockGuard, LockManager, LockOptions, LockStore, OnContended, OnLost, Result,
    supervise, token,
};

/// What one acquisition came to.
pub(crate) enum Outcome {
    Acquired(LockGuard),
    /// Held by somebody else for the whole wait; their lease had this left,
    /// when the store said.
    Contended(Option<Duration>),
}

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
#[derive(Clone, Debug)]
#[must_use = "a Lock does nothing until you call acquire() or run()"]
pub struct Lock {
    manager: LockManager,
    /// The prefix, then the name: one allocation per lock.
    key: Arc<str>,
    /// Where the name starts in `key`.
    name_at: usize,
    ttl: Duration,
    wait: Duration,
    options: LockOptions,
}

// Defined here, beside what it builds, rather than in manager.rs: a lock
// holds its manager, so the manager's module stays below this one.
impl LockManager {
    /// A lock named `name`, whose lease lasts `ttl` unless released or
    /// extended first. Nothing is acquired yet.
    ///
    /// The name is checked when the lock is used: an empty name, a zero TTL or
    /// a TTL beyond the store's range make [`Lock::acquire`] return an error.
    pub fn lock(&self, name: impl AsRef<str>, ttl: Duration) -> Lock {
        Lock::new(self.clone(), name.as_ref(), ttl)
    }
}

impl Lock {
    fn new(manager: LockManager, name: &str, ttl: Duration) -> Lock {
        let key = joined(manager.shared_prefix(), name);
        Lock {
            name_at: manager.prefix().len(),
            manager,
            key,
            ttl,
            wait: Duration::ZERO,
            options: LockOptions::DEFAULT,
        }
    }

    /// The same lock, waiting up to `wait` for a holder to let go before
    /// giving up with `Ok(None)`.
    ///
    /// A waiter does not poll: it wakes when the lock is released, when the
    /// holder's TTL runs out, or at its deadline, whichever comes first.
    pub fn wait_for(self, wait: Duration) -> Self {
        Lock { wait, ..self }
    }

    /// The same lock with all of `options` at once (what `#[locked]` uses).
    pub fn with_options(self, options: LockOptions) -> Self {
        Lock { options, ..self }
    }

    /// The same lock, renewed while [`run`](Lock::run)'s work runs: every
    /// `ttl / 3` the lease is extended back to `ttl`, atomically.
    ///
    /// A crashed process stops renewing, so its lease still ends within one
    /// `ttl`; a live but stuck one renews forever unless
    /// [`max_hold`](Lock::max_hold) caps it.
    pub fn renew(mut self) -> Self {
        self.options.renew = true;
        self
    }

    /// The same lock, renewed for at most `max_hold` in all: renewals never
    /// push the lease past acquisition + `max_hold`, so stuck work cannot hold
    /// the lock forever. Requires [`renew`](Lock::renew).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.options.max_hold = Some(max_hold);
        self
    }

    /// The same lock, reacting to a lost lease as `on_lost` says (see [`OnLost`]).
    pub fn on_lost(mut self, on_lost: OnLost) -> Self {
        self.options.on_lost = on_lost;
        self
    }

    /// The same lock, whose claim stands for at least `at_least` after it was
    /// acquired, even when the work ends sooner: instead of deleting the lease,
    /// release shortens it to end at acquisition + `at_least`, and the store's
    /// own expiry ends it. What "run this at most once a minute, fleet-wide"
    /// needs. Must not exceed the TTL.
    pub fn at_least(mut self, at_least: Duration) -> Self {
        self.options.at_least = Some(at_least);
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
        self.options.fenced = true;
        self
    }

    /// The same lock, refusing to run on a per-process store: acquire fails
    /// with [`Error::NotShared`] unless the manager [is
    /// shared](LockManager::is_shared). For work that must not run twice
    /// across the fleet, where a forgotten Redis setup would silently give
    /// every process its own lock.
    pub fn shared(mut self) -> Self {
        self.options.shared = true;
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
        self.options.contended = contended;
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
        self.options.permits = permits;
        self
    }

    /// The same lock, named `label` in metrics (the `lock` label, with the
    /// `metrics` feature; `"unlabelled"` when none is given).
    ///
    /// Give the kind of lock, not its instance: `"invoice"`, not
    /// `"invoice:4411"`, or every name becomes a series of its own.
    /// `#[locked]` functions are labelled with their name template.
    pub fn label(mut self, label: &'static str) -> Self {
        self.options.label = Some(label);
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
    /// - [`Error::InvalidName`] for an empty name;
    /// - [`Error::InvalidTtl`] for a zero TTL or one beyond the store's range;
    /// - [`Error::InvalidOptions`] for options that contradict each other
    ///   (`max_hold` without `renew`, `at_least` longer than the TTL);
    /// - [`Error::FencingUnsupported`] for a [`fenced`](Lock::fenced) lock on
    ///   a store that cannot fence;
    /// - [`Error::NotShared`] for a [`shared`](Lock::shared) lock on a
    ///   per-process store;
    /// - [`Error::Contended`] when somebody else held it and the lock was set
    ///   to [`OnContended::Error`];
    /// - [`Error::Store`] when the store fails, or answers only after the
    ///   lease it took has run out (its local deadline, counted from just
    ///   before the request was sent, has passed): no guard for a lease
    ///   that may already be someone else's; the lease is given back.
    pub async fn acquire(&self) -> Result<Option<LockGuard>> {
        if self.reentered() {
            return Err(Error::Reentrant {
                key: self.key.to_string(),
            });
        }
        match self.acquire_outcome().await? {
            Outcome::Acquired(guard) => Ok(Some(guard)),
            Outcome::Contended(remaining) => match self.options.contended {
                OnContended::Error => Err(self.contended(remaining).await),
                _ => Ok(None),
            },
        }
    }

    /// [`acquire_attempts`](Lock::acquire_attempts), its outcome counted
    /// and timed.
    pub(crate) async fn acquire_outcome(&self) -> Result<Outcome> {
        let started = Instant::now();
        let labels = Labels::of_store(self.options.label, &**self.manager.store());
        let outcome = self.acquire_attempts(labels, started).await;
        let acquired = match &outcome {
            Ok(Outcome::Acquired(_)) => Some(true),
            Ok(Outcome::Contended(_)) => Some(false),
            Err(_) => None,
        };
        metrics::acquisition(labels, acquired, started);
        outcome
    }

    /// Takes the lock, the first attempt sent at `started` (just read from
    /// the clock).
    async fn acquire_attempts(&self, labels: Labels, started: Instant) -> Result<Outcome> {
        self.validate()?;
        let token = token::new_token();
        let store = self.manager.store();
        let ttl = store_ttl(self.ttl, &**store);
        // One key per permit; a plain lock (one permit) is its own key.
        let slots: Vec<Arc<str>>;
        let slots: &[Arc<str>] = if self.options.permits > 1 {
            slots = (0..self.options.permits)
                .map(|slot| permit_key(&self.key, slot))
                .collect();
            &slots
        } else {
            std::slice::from_ref(&self.key)
        };
        let mut request = AcquireRequest::sent_at(&self.key, &token, ttl, started);
        request.wake = !self.wait.is_zero();
        request.fenced = self.options.fenced;
        // A single lease to wait for: the store may hand it over on release.
        request.local.grant = request.wake && slots.len() == 1;
        let mut wakeups: Vec<Wakeup> = Vec::new();
        loop {
            // The permits in a random rotation, so waiters spread over them
            // instead of all trying the first.
            let first = if slots.len() > 1 {
                rand::random_range(0..slots.len())
            } else {
                0
            };
            let mut shortest: Option<Duration> = None;
            // The last round's registrations stay until this round's are
            // made: a store that listens per key keeps listening between
            // attempts instead of stopping and starting again each time.
            // (`None` on the first round, which has none to keep.)
            let previous = (!wakeups.is_empty()).then(|| std::mem::take(&mut wakeups));
            for offset in 0..slots.len() {
                let slot = &slots[(first + offset) % slots.len()];
                let attempt = AcquireRequest {
                    key: slot,
                    local: request.local.with_key(slot),
                    ..request
                };
                // The store's clock starts the lease at or after
                // `request.sent`, so deadlines counted from it are never
                // later than the store's.
                let attempt = match store.acquire_now(attempt) {
                    Some(attempt) => attempt?,
                    None => {
                        // From the moment the request may reach the store
                        // until its reply is read, a lease under `token` may
                        // exist that only this future knows of: if the future
                        // is dropped here, or the store fails, it is given back.
                        let in_flight = InFlight::new(store, slot, &token, ttl);
                        let attempt = store.acquire(attempt).await?;
                        if let Attempt::Acquired { .. } = attempt {
                            // A reply can come after the lease it reports
                            // ran out (replies queued on a slow link): the
                            // lock may be someone else's by now. No guard
                            // then; the lease, if it still exists, is given
                            // back as the in-flight guard drops.
                            let answered = request.sent.elapsed();
                            if Instant::now() >= local_deadline(request.sent, ttl, &**store) {
                                drop(in_flight);
                                return Err(Error::Store {
                                    operation: "acquire",
                                    key: slot.to_string(),
                                    source: format!(
                                        "the store answered after {answered:?}, when the lease of {ttl:?} had already run out; the lease was given back: use a longer ttl, or find why the store answers this slowly"
                                    )
                                    .into(),
                                });
                            }
                        }
                        in_flight.landed();
                        attempt
                    }
                };
                match attempt {
                    Attempt::Acquired { fence } => {
                        let sent = request.sent;
                        return Ok(self.acquired(slot, token, fence, sent, started, labels));
                    }
                    Attempt::Held { remaining, wakeup } => {
                        if let Some(remaining) = remaining {
                            shortest = Some(shortest.map_or(remaining, |s| s.min(remaining)));
                        }
                        wakeups.extend(wakeup);
                    }
                }
            }
            // A release may have handed the lease to last round's waiter
            // meanwhile: ours, then, rather than given back to pass on.
            let handed = previous
                .filter(|_| request.local.grant)
                .into_iter()
                .flatten()
                .find_map(|mut w| w.granted());
            if let Some(Woken::Granted { fence, since }) = handed {
                return Ok(self.acquired(&self.key, token, fence, since, started, labels));
            }
            // `None`: a wait too long to represent, which is waiting for good.
            let left = match started.checked_add(self.wait) {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                None => Duration::MAX,
            };
            if left.is_zero() {
                tracing::debug!(
                    key = %self.key,
                    waited_us = started.elapsed().as_micros() as u64,
                    holder_remaining_ms = shortest.map(|d| d.as_millis() as u64),
                    "lock contended"
                );
                return Ok(Outcome::Contended(shortest));
            }
            // A store reports the remaining TTL whenever we wait; if one
            // does not, our own TTL bounds the holder's.
            let nap = nap_until_expiry(shortest.unwrap_or(self.ttl)).min(left);
            let woken = if wakeups.is_empty() {
                tokio::time::sleep(nap).await;
                None
            } else {
                tokio::select! {
                    woken = any_of(&mut wakeups) => Some(woken),
                    // A release may have handed the lease over just as the
                    // nap ended: take it rather than try again.
                    () = tokio::time::sleep(nap) => if request.local.grant {
                        wakeups.iter_mut().find_map(Wakeup::granted)
                    } else {
                        None
                    },
                }
            };
            if let Some(Woken::Granted { fence, since }) = woken {
                // Handed over by the release, under this attempt's token:
                // a single permit, so the lock's own key.
                return Ok(self.acquired(&self.key, token, fence, since, started, labels));
            }
            request.sent = Instant::now();
        }
    }

    /// The guard for a lease taken under `token` on `slot`, starting at
    /// `sent` on tokio's clock. Always inlined: the uncontended acquire is
    /// counted in instructions (`scripts/instructions`), and a call here
    /// cost it 66 of them.
    #[inline(always)]
    fn acquired(
        &self,
        slot: &Arc<str>,
        token: Arc<str>,
        fence: Option<u64>,
        sent: Instant,
        started: Instant,
        labels: Labels,
    ) -> Outcome {
        tracing::debug!(
            key = %slot,
            waited_us = started.elapsed().as_micros() as u64,
            ?fence,
            "lock acquired"
        );
        let hold_until = self.options.at_least.and_then(|d| sent.checked_add(d));
        Outcome::Acquired(LockGuard::new(
            Arc::clone(self.manager.store()),
            Arc::clone(slot),
            token,
            fence,
            sent,
            store_ttl(self.ttl, &**self.manager.store()),
            hold_until,
            labels,
        ))
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
        if self.reentered() {
            // This task holds the lock already: the work runs under that
            // lease, neither taking nor giving back another.
            tracing::debug!(key = %self.key, "lock re-entered: the work runs under the lease this task holds");
            return work.await.map(Some);
        }
        match self.acquire_outcome().await? {
            Outcome::Acquired(guard) => supervise::run_held(self, guard, work).await.map(Some),
            Outcome::Contended(remaining) => match self.options.contended {
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
        if self.reentered() {
            tracing::debug!(key = %self.key, "lock re-entered: the work runs under the lease this task holds");
            return work.await;
        }
        match self.acquire_outcome().await? {
            Outcome::Acquired(guard) => supervise::run_held(self, guard, work).await,
            Outcome::Contended(remaining) => Err(E::from(self.contended(remaining).await)),
        }
    }

    /// Removes the lease whoever holds it (every permit's, for a
    /// semaphore). `Ok(true)` if there was one.
    ///
    /// For operators and tests: the holder is not told, and its work goes on
    /// alongside whoever takes the lock next.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty name; [`Error::Store`] when the
    /// store fails.
    pub async fn force_release(&self) -> Result<bool> {
        self.validate_name()?;
        let store = self.manager.store();
        let mut released = false;
        for slot in 0..self.options.permits.max(1) {
            released |= store.force_release(&permit_key(&self.key, slot)).await?;
        }
        Ok(released)
    }

    /// Every current holder: one for a held lock, up to
    /// [`permits`](Lock::permits) for a semaphore, none when free.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty name; [`Error::Store`] when the
    /// store fails.
    pub async fn holders(&self) -> Result<Vec<Holder>> {
        self.validate_name()?;
        let store = self.manager.store();
        let mut holders = Vec::new();
        for slot in 0..self.options.permits.max(1) {
            holders.extend(store.holder(&permit_key(&self.key, slot)).await?);
        }
        Ok(holders)
    }

    /// Whether anybody holds the lock right now.
    ///
    /// # Errors
    ///
    /// As [`holder`](Lock::holder).
    pub async fn is_held(&self) -> Result<bool> {
        Ok(self.holder().await?.is_some())
    }

    /// Who holds the lock right now, and for how much longer. For a
    /// semaphore, the first holder found ([`holders`](Lock::holders) lists
    /// them all).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty name; [`Error::Store`] when the
    /// store fails.
    pub async fn holder(&self) -> Result<Option<Holder>> {
        if self.options.permits > 1 {
            return Ok(self.holders().await?.into_iter().next());
        }
        self.validate_name()?;
        self.manager.store().holder(&self.key).await
    }

    /// Which lock this is, for re-entry: its manager's store and its key.
    pub(crate) fn id(&self) -> LockId {
        LockId {
            store: self.store_id(),
            key: Arc::clone(&self.key),
        }
    }

    /// The manager's store, by address: one store, one lock namespace.
    fn store_id(&self) -> usize {
        Arc::as_ptr(self.manager.store()).cast::<()>() as usize
    }

    /// Whether this task already runs under this lock's lease.
    fn reentered(&self) -> bool {
        held_by_this_task(self.store_id(), &self.key)
    }

    /// The store key: the manager's prefix followed by the name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lock name, as given.
    pub fn name(&self) -> &str {
        &self.key[self.name_at..]
    }

    /// How long a lease lasts unless released or extended first.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long [`acquire`](Lock::acquire) waits for a holder to let go.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The lock's options.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    pub(crate) fn manager(&self) -> &LockManager {
        &self.manager
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
            key: self.key.to_string(),
            holder_remaining: remaining,
        }
    }

    fn validate(&self) -> Result<()> {
        self.validate_name()?;
        if is_permit_key(&self.key) {
            return Err(permit_name(self.name()));
        }
        validate_ttl(&self.key, self.ttl, &**self.manager.store())?;
        self.options.check(&self.key, self.ttl, &self.manager)
    }

    fn validate_name(&self) -> Result<()> {
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

/// Gives back, when dropped armed, the lease an acquire in flight may have
/// taken: between sending an acquire and reading its reply, only this future
/// knows the token, so nobody else could ever release that lease before its
/// TTL.
struct InFlight<'a> {
    store: &'a Arc<dyn LockStore>,
    key: &'a Arc<str>,
    token: &'a Arc<str>,
    /// The TTL asked for: how long a lease the acquire took can last.
    ttl: Duration,
    armed: bool,
}

impl<'a> InFlight<'a> {
    fn new(
        store: &'a Arc<dyn LockStore>,
        key: &'a Arc<str>,
        token: &'a Arc<str>,
        ttl: Duration,
    ) -> Self {
        InFlight {
            store,
            key,
            token,
            ttl,
            armed: true,
        }
    }

    /// The store answered: what it holds now is accounted for by the caller.
    fn landed(mut self) {
        self.armed = false;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            give_back(
                self.store,
                self.key,
                self.token,
                None,
                self.ttl,
                GiveBack::AbandonedAcquire,
            );
        }
    }
}

/// Resolves when any of `wakeups` does, with what woke it.
async fn any_of(wakeups: &mut [Wakeup]) -> Woken {
    std::future::poll_fn(|cx| {
        for wakeup in wakeups.iter_mut() {
            if let std::task::Poll::Ready(woken) = wakeup.poll_woken(cx) {
                return std::task::Poll::Ready(woken);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// How long to sleep when the holder's lease has `remaining` left and no
/// release wakes us first: until it runs out, plus a little jitter so many
/// waiters do not retry in the same instant.
fn nap_until_expiry(remaining: Duration) -> Duration {
    const FLOOR: Duration = Duration::from_micros(100);
    let spread = (remaining / 16).clamp(Duration::from_millis(1), Duration::from_millis(25));
    let jitter = spread.mul_f64(rand::random::<f64>());
    remaining.saturating_add(FLOOR).saturating_add(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nap_outlasts_the_holder_by_a_bounded_jitter() {
        for remaining in [
            Duration::ZERO,
            Duration::from_millis(3),
            Duration::from_secs(60),
        ] {
            let nap = nap_until_expiry(remaining);
            assert!(nap > remaining, "{nap:?} must outlast {remaining:?}");
            assert!(
                nap <= remaining + Duration::from_millis(26),
                "{nap:?} oversleeps {remaining:?}"
            );
        }
        assert_eq!(
            nap_until_expiry(Duration::MAX),
            Duration::MAX,
            "saturates, never panics"
        );
    }
}
