//! [`Lock`]: a named lease, not yet held, and how to take it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::guard::{GiveBack, give_back};
use crate::lease::Lease;
use crate::store::{AcquireRequest, Attempt};
use crate::{Error, Holder, LockGuard, LockManager, LockStore, Result, owner};

/// What locked work does when its lease is lost while it runs.
///
/// A lease is lost when a renewal finds it gone (expired, or force-released
/// from outside) or when its deadline passes without a renewal. Set with
/// [`Lock::on_lost`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OnLost {
    /// Log at ERROR and let the work finish (the default). The work may then
    /// run alongside the next holder.
    #[default]
    Continue,
    /// Drop the work at that moment and return [`Error::LeaseLost`].
    Cancel,
}

/// The lifecycle options of a [`Lock`], all off by default.
#[derive(Clone, Copy, Debug, Default)]
struct Options {
    renew: bool,
    max_hold: Option<Duration>,
    on_lost: OnLost,
    at_least: Option<Duration>,
    fenced: bool,
    require_shared: bool,
}

/// What one acquisition came to.
enum Outcome {
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
/// The builder methods set the lease lifecycle: [`renew`](Lock::renew) and
/// [`max_hold`](Lock::max_hold) keep a long job's lease alive (within a cap),
/// [`on_lost`](Lock::on_lost) says what happens to work whose lease is lost,
/// [`at_least`](Lock::at_least) keeps a claim standing after early work,
/// [`fenced`](Lock::fenced) hands out fencing tokens, and
/// [`require_shared`](Lock::require_shared) refuses per-process stores.
/// Renewal and the lost-lease reaction apply to [`run`](Lock::run) and
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
    name: String,
    key: Arc<str>,
    ttl: Duration,
    wait: Duration,
    options: Options,
}

impl Lock {
    pub(crate) fn new(manager: LockManager, name: String, ttl: Duration) -> Lock {
        let key: Arc<str> = Arc::from(format!("{}{name}", manager.prefix()));
        Lock {
            manager,
            name,
            key,
            ttl,
            wait: Duration::ZERO,
            options: Options::default(),
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
    /// for systems that must reject writes from a stale holder. Stores that
    /// cannot keep one make acquire fail with [`Error::FencingUnsupported`].
    pub fn fenced(mut self) -> Self {
        self.options.fenced = true;
        self
    }

    /// The same lock, refusing to run on a per-process store: acquire fails
    /// with [`Error::NotShared`] unless the manager [is
    /// shared](LockManager::is_shared). For work that must not run twice
    /// across the fleet, where a forgotten Redis setup would silently give
    /// every process its own lock.
    pub fn require_shared(mut self) -> Self {
        self.options.require_shared = true;
        self
    }

    /// Takes the lock: `Ok(Some(guard))` when it is ours, `Ok(None)` when
    /// somebody else held it for the whole wait.
    ///
    /// Release the guard with [`LockGuard::release`] when done. A guard
    /// dropped unreleased is released for you (see [`LockGuard`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidName`] for an empty name, [`Error::InvalidTtl`] for a
    /// zero TTL or one beyond the store's range, and [`Error::Store`] when the
    /// store fails.
    pub async fn acquire(&self) -> Result<Option<LockGuard>> {
        match self.acquire_outcome().await? {
            Outcome::Acquired(guard) => Ok(Some(guard)),
            Outcome::Contended(_) => Ok(None),
        }
    }

    async fn acquire_outcome(&self) -> Result<Outcome> {
        self.validate()?;
        let token = owner::new_token();
        let store = self.manager.store();
        let ttl = store_ttl(self.ttl, &**store);
        let mut request = AcquireRequest::new(&self.key, &token, ttl);
        request.wake = !self.wait.is_zero();
        request.fenced = self.options.fenced;
        let started = request.sent;
        // `None`: a wait too long to represent, which is waiting for good.
        let deadline = started.checked_add(self.wait);
        loop {
            // The store's clock starts the lease at or after `request.sent`,
            // so deadlines counted from it are never later than the store's.
            let attempt = match store.acquire_now(request) {
                Some(attempt) => attempt?,
                None => {
                    // From the moment the request may reach the store until
                    // its reply is read, a lease under `token` may exist that
                    // only this future knows of: if the future is dropped
                    // here, or the store fails, it is given back.
                    let in_flight = InFlight::new(store, &self.key, &token);
                    let attempt = store.acquire(request).await?;
                    in_flight.landed();
                    attempt
                }
            };
            match attempt {
                Attempt::Acquired { fence } => {
                    tracing::debug!(
                        key = %self.key,
                        waited_us = started.elapsed().as_micros() as u64,
                        ?fence,
                        "lock acquired"
                    );
                    let sent = request.sent;
                    let hold_until = self.options.at_least.and_then(|d| sent.checked_add(d));
                    return Ok(Outcome::Acquired(LockGuard::new(
                        Arc::clone(store),
                        Arc::clone(&self.key),
                        token,
                        fence,
                        sent,
                        hold_until,
                    )));
                }
                Attempt::Held { remaining, wakeup } => {
                    let left = match deadline {
                        Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                        None => Duration::MAX,
                    };
                    if left.is_zero() {
                        tracing::debug!(
                            key = %self.key,
                            waited_us = started.elapsed().as_micros() as u64,
                            holder_remaining_ms = remaining.map(|d| d.as_millis() as u64),
                            "lock contended"
                        );
                        return Ok(Outcome::Contended(remaining));
                    }
                    // A store reports the remaining TTL whenever we wait; if
                    // one does not, our own TTL bounds the holder's.
                    let nap = nap_until_expiry(remaining.unwrap_or(self.ttl)).min(left);
                    match wakeup {
                        Some(wakeup) => {
                            tokio::select! {
                                () = wakeup => {}
                                () = tokio::time::sleep(nap) => {}
                            }
                        }
                        None => tokio::time::sleep(nap).await,
                    }
                    request.sent = Instant::now();
                }
            }
        }
    }

    /// Runs `work` while holding the lock, then releases it.
    ///
    /// - `Ok(Some(value))`: the lock was ours and the work returned `Ok(value)`.
    /// - `Ok(None)`: somebody else held it (for the whole wait); the work was
    ///   not run.
    /// - `Err(e)`: the work's own error, or a lock error converted with `From`.
    ///
    /// The work's result always wins: when the work fails, its error is
    /// returned even if the release fails too, and a release failure after
    /// successful work is logged at WARN rather than turned into an error
    /// (the lease then ends at its TTL). If the work panics or this future is
    /// dropped mid-way, the guard's drop releases the lease.
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
        match self.acquire_outcome().await? {
            Outcome::Acquired(guard) => self.run_held(guard, work).await.map(Some),
            Outcome::Contended(_) => Ok(None),
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
        match self.acquire_outcome().await? {
            Outcome::Acquired(guard) => self.run_held(guard, work).await,
            Outcome::Contended(remaining) => Err(E::from(Error::Contended {
                key: self.key.to_string(),
                holder_remaining: remaining,
            })),
        }
    }

    /// Runs `work` under `guard`: watches (and renews) the lease, reacts to
    /// its loss, then gives it back. The work's result always wins.
    async fn run_held<T, E, W>(&self, guard: LockGuard, work: W) -> Result<T, E>
    where
        W: Future<Output = Result<T, E>> + Unpin,
        E: From<Error>,
    {
        let store = self.manager.store();
        let lease = Lease::new(
            Arc::clone(&self.key),
            Arc::clone(guard.token()),
            guard.fence(),
            local_deadline(guard.started(), store_ttl(self.ttl, &**store), &**store),
        );
        let outcome = {
            let mut work = std::pin::pin!(lease.scope(work));
            // Only renewal and cancellation need a watcher running beside the
            // work; otherwise the lease's own deadline is all there is to
            // know, and `Lease::lost` waits for it by itself.
            let watched = self.options.renew || self.options.on_lost == OnLost::Cancel;
            let finished = if watched {
                tokio::select! {
                    biased;
                    outcome = &mut work => Some(outcome),
                    () = self.watch(&guard, &lease) => None,
                }
            } else {
                let outcome = (&mut work).await;
                if lease.is_lost() {
                    log_lost_and_continued(&self.key, &guard);
                }
                Some(outcome)
            };
            match finished {
                Some(outcome) => Some(outcome),
                // Leaving this block drops the work, before anything else
                // is awaited: it cannot run on while the lease is given back.
                None if self.options.on_lost == OnLost::Cancel => None,
                None => {
                    log_lost_and_continued(&self.key, &guard);
                    Some(work.await)
                }
            }
        };
        let Some(outcome) = outcome else {
            let mut guard = guard;
            let held = guard.held_for();
            tracing::error!(key = %self.key, held_ms = held.as_millis() as u64, "lock lease lost: cancelled the work");
            // The local deadline passes a clock margin before the store's, so
            // the lease may still be ours: give it back now rather than make
            // the next holder wait out the rest of it.
            if let Err(error) = guard.give_back().await {
                tracing::warn!(key = %self.key, %error, "could not give back a lost lease; it ends at its ttl");
            }
            return Err(E::from(Error::LeaseLost {
                key: self.key.to_string(),
                held,
            }));
        };
        if let Err(error) = guard.release().await {
            tracing::warn!(
                key = %self.key,
                %error,
                "could not release the lock after the work finished; it ends at its ttl"
            );
        }
        outcome
    }

    /// Resolves when the lease is lost, after marking `lease` lost. Renews
    /// the lease meanwhile when asked to.
    ///
    /// The lease's local deadline is a hard limit: a renewal still in flight
    /// when it passes (the store stalled, the network dropped our packets)
    /// does not hold the work up, because by then the store may already have
    /// handed the lease to someone else.
    async fn watch(&self, guard: &LockGuard, lease: &Lease) {
        let store = self.manager.store();
        let started = guard.started();
        let hold_end = self
            .options
            .max_hold
            .and_then(|max_hold| started.checked_add(max_hold));
        let mut renewing = self.options.renew;
        loop {
            let deadline = lease.deadline();
            if !renewing {
                tokio::time::sleep_until(deadline).await;
                lease.mark_lost();
                return;
            }
            let next = Instant::now()
                .checked_add(self.ttl / 3)
                .map_or(deadline, |next| next.min(deadline));
            tokio::time::sleep_until(next).await;
            let sent = Instant::now();
            if sent >= deadline {
                lease.mark_lost();
                return;
            }
            // Never renew past acquisition + max_hold.
            let extension = match hold_end {
                Some(end) => self.ttl.min(end.saturating_duration_since(sent)),
                None => self.ttl,
            };
            if extension.is_zero() {
                tracing::warn!(key = %self.key, "lock reached its max_hold: no longer renewing");
                renewing = false;
                continue;
            }
            let extension = store_ttl(extension, &**store);
            let extended = tokio::select! {
                biased;
                () = tokio::time::sleep_until(deadline) => {
                    tracing::warn!(key = %self.key, "a lock renewal was still in flight at the lease's deadline");
                    lease.mark_lost();
                    return;
                }
                extended = guard.extend(extension) => extended,
            };
            match extended {
                Ok(true) => lease.set_deadline(local_deadline(sent, extension, &**store)),
                Ok(false) => {
                    lease.mark_lost();
                    return;
                }
                Err(error) => {
                    // Keep trying until the deadline: the store may be back.
                    tracing::warn!(key = %self.key, %error, "could not renew the lock; retrying until its deadline");
                }
            }
        }
    }

    /// Removes the lease whoever holds it. `Ok(true)` if there was one.
    ///
    /// For operators and tests: the holder is not told, and its work goes on
    /// alongside whoever takes the lock next.
    pub async fn force_release(&self) -> Result<bool> {
        self.validate_name()?;
        self.manager.store().force_release(&self.key).await
    }

    /// Whether anybody holds the lock right now.
    pub async fn is_held(&self) -> Result<bool> {
        Ok(self.holder().await?.is_some())
    }

    /// Who holds the lock right now, and for how much longer.
    pub async fn holder(&self) -> Result<Option<Holder>> {
        self.validate_name()?;
        self.manager.store().holder(&self.key).await
    }

    /// The store key: the manager's prefix followed by the name.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The lock name, as given.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long a lease lasts unless released or extended first.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// How long [`acquire`](Lock::acquire) waits for a holder to let go.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    fn validate(&self) -> Result<()> {
        self.validate_name()?;
        let store = self.manager.store();
        validate_ttl(&self.key, self.ttl, store.max_ttl())?;
        let invalid = |reason: String| {
            Err(Error::InvalidOptions {
                key: self.key.to_string(),
                reason,
            })
        };
        if self.options.max_hold.is_some() && !self.options.renew {
            return invalid(
                "max_hold caps renewal, but the lock does not renew; add renew() or drop max_hold"
                    .to_owned(),
            );
        }
        if let Some(at_least) = self.options.at_least
            && at_least > self.ttl
        {
            return invalid(format!(
                "at_least ({at_least:?}) is longer than the ttl ({:?}), so the claim could not \
                 stand that long; raise the ttl to at least {at_least:?}",
                self.ttl
            ));
        }
        if self.options.fenced && !store.fencing() {
            return Err(Error::FencingUnsupported {
                key: self.key.to_string(),
            });
        }
        if self.options.require_shared && !self.manager.is_shared() {
            return Err(Error::NotShared {
                key: self.key.to_string(),
            });
        }
        Ok(())
    }

    fn validate_name(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(Error::InvalidName {
                name: self.name.clone(),
                reason: "a lock name must not be empty; name the resource it protects, \
                         for example \"reports:{tenant}\"",
            });
        }
        Ok(())
    }
}

/// `ttl` rounded up to a whole multiple of the store's resolution: what the
/// store is asked to keep, never less than what the caller asked for.
pub(crate) fn store_ttl(ttl: Duration, store: &dyn LockStore) -> Duration {
    round_up(ttl, store.ttl_resolution())
}

fn round_up(ttl: Duration, resolution: Duration) -> Duration {
    let step = resolution.as_nanos();
    if step == 0 {
        return ttl;
    }
    let over = ttl.as_nanos() % step;
    if over == 0 {
        return ttl;
    }
    // `step - over` is below the resolution, which fits in u64 nanoseconds
    // for any resolution under 584 years.
    match u64::try_from(step - over) {
        Ok(short) => ttl.saturating_add(Duration::from_nanos(short)),
        Err(_) => ttl,
    }
}

/// The local deadline of a lease the store started at or after `sent` and
/// keeps for `ttl`: `sent + ttl`, less the store's clock margin. An instant
/// too far out to represent is a deadline that never comes.
fn local_deadline(sent: Instant, ttl: Duration, store: &dyn LockStore) -> Instant {
    let lasts = ttl.saturating_sub(store.clock_margin(ttl));
    sent.checked_add(lasts).unwrap_or_else(far_future)
}

/// Gives back, when dropped armed, the lease an acquire in flight may have
/// taken: between sending an acquire and reading its reply, only this future
/// knows the token, so nobody else could ever release that lease before its
/// TTL.
struct InFlight<'a> {
    store: &'a Arc<dyn LockStore>,
    key: &'a Arc<str>,
    token: &'a Arc<str>,
    armed: bool,
}

impl<'a> InFlight<'a> {
    fn new(store: &'a Arc<dyn LockStore>, key: &'a Arc<str>, token: &'a Arc<str>) -> Self {
        InFlight {
            store,
            key,
            token,
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
                GiveBack::AbandonedAcquire,
            );
        }
    }
}

/// Checks a TTL against zero and the store's range.
pub(crate) fn validate_ttl(key: &str, ttl: Duration, max: Duration) -> Result<()> {
    let reason = if ttl.is_zero() {
        "a zero ttl expires at once; give the longest time the work may take, \
         for example 30s"
            .to_owned()
    } else if ttl > max {
        format!("the store keeps leases for at most {max:?}; use a shorter ttl")
    } else {
        return Ok(());
    };
    Err(Error::InvalidTtl {
        key: key.to_owned(),
        ttl,
        reason,
    })
}

/// The ERROR a lost lease under [`OnLost::Continue`] is reported with.
fn log_lost_and_continued(key: &str, guard: &LockGuard) {
    tracing::error!(
        key = %key,
        held_ms = guard.held_for().as_millis() as u64,
        "lock lease lost while the work runs on; another holder may run alongside it"
    );
}

/// An instant no lease reaches: used when `start + ttl` overflows.
fn far_future() -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_secs(100 * 365 * 24 * 60 * 60))
        .unwrap_or(now)
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

    #[test]
    fn a_ttl_is_checked_against_zero_and_the_store_range() {
        let max = Duration::from_secs(10);
        assert!(validate_ttl("k", Duration::from_secs(1), max).is_ok());
        assert!(matches!(
            validate_ttl("k", Duration::ZERO, max),
            Err(Error::InvalidTtl { .. })
        ));
        assert!(matches!(
            validate_ttl("k", Duration::from_secs(11), max),
            Err(Error::InvalidTtl { .. })
        ));
    }
}
