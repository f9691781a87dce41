//! [`Lock`]: a named lease, not yet held, and how to take it.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::store::{AcquireRequest, Attempt};
use crate::{Error, Holder, LockGuard, LockManager, Result, owner};

/// A named lock, not yet held: built by [`LockManager::lock`].
///
/// Take it with [`acquire`](Lock::acquire) (and hold the returned guard) or
/// with [`run`](Lock::run) (which releases for you). By default neither waits:
/// when somebody else holds the lock they return `Ok(None)` at once. Use
/// [`wait_for`](Lock::wait_for) to wait for it instead.
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
        self.validate()?;
        let started = Instant::now();
        // `None`: a wait too long to represent, which is waiting for good.
        let deadline = started.checked_add(self.wait);
        let waits = !self.wait.is_zero();
        let token = owner::new_token();
        let store = self.manager.store();
        loop {
            let mut request = AcquireRequest::new(&self.key, &token, self.ttl);
            request.wake = waits;
            match store.acquire(request).await? {
                Attempt::Acquired { fence } => {
                    let waited = started.elapsed();
                    tracing::debug!(key = %self.key, waited_us = waited.as_micros() as u64, ?fence, "lock acquired");
                    return Ok(Some(LockGuard::new(
                        Arc::clone(store),
                        Arc::clone(&self.key),
                        token,
                        fence,
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
                            holder_remaining_ms = remaining.as_millis() as u64,
                            "lock contended"
                        );
                        return Ok(None);
                    }
                    let nap = nap_until_expiry(remaining).min(left);
                    match wakeup {
                        Some(wakeup) => {
                            tokio::select! {
                                () = wakeup => {}
                                () = tokio::time::sleep(nap) => {}
                            }
                        }
                        None => tokio::time::sleep(nap).await,
                    }
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
    pub async fn run<T, E, F>(&self, work: F) -> Result<Option<T>, E>
    where
        F: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        let Some(guard) = self.acquire().await? else {
            return Ok(None);
        };
        let outcome = work.await;
        if let Err(error) = guard.release().await {
            tracing::warn!(
                key = %self.key,
                %error,
                "could not release the lock after the work finished; it ends at its ttl"
            );
        }
        outcome.map(Some)
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
        validate_ttl(&self.key, self.ttl, self.manager.store().max_ttl())
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
