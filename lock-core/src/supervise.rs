//! Supervising locked work: the lease is watched (and renewed) beside the
//! work, its loss is acted on, and it is given back when the work ends.
//!
//! ```text
//! run(work) --acquire--> guard --+--> work (with its Lease as current())
//!                                |
//!                                +--> watch: sleep ttl/3, extend, ... until
//!                                     the lease's local deadline or a
//!                                     renewal that finds it gone
//!                                |
//! work ends ---------------------+--> release (the work's result wins)
//! lease lost, OnLost::Cancel ----+--> work dropped, lease given back,
//!                                     Err(LeaseLost)
//! ```

use std::future::Future;

use tokio::time::Instant;

use crate::acquire::Target;
use crate::lease::Lease;
use crate::metrics;
use crate::store::store_ttl;
use crate::{Error, LockGuard, OnLost, Result};

/// Runs `work` under `guard`: watches (and renews) the lease, reacts to its
/// loss, then gives it back. The work's result always wins.
pub(crate) async fn run_held<T, E, W>(lock: &Target, mut guard: LockGuard, work: W) -> Result<T, E>
where
    W: Future<Output = Result<T, E>> + Unpin,
    E: From<Error>,
{
    let options = &lock.options;
    let key: &str = &lock.key;
    let lease = guard.lease(store_ttl(lock.ttl, &**lock.manager.store()), lock.id());
    let outcome = {
        let mut work = std::pin::pin!(lease.scope(work));
        // Only renewal and cancellation need a watcher running beside the
        // work; otherwise the lease's own deadline is all there is to know,
        // and `Lease::lost` waits for it by itself.
        let watched = options.renew || options.on_lost == OnLost::Cancel;
        let cancel = options.on_lost == OnLost::Cancel;
        let finished = if watched {
            // Under `Cancel`, the clock is read before each step of the
            // work: a process resumed after a pause past the deadline may
            // be polled before the timer driver has fired the watcher's
            // timer, and the work must not take that step.
            let step = std::future::poll_fn(|cx| {
                if cancel && lease.is_lost() {
                    lease.mark_lost();
                    return std::task::Poll::Ready(None);
                }
                work.as_mut().poll(cx).map(Some)
            });
            tokio::select! {
                biased;
                outcome = step => outcome,
                () = watch(lock, &guard, &lease) => None,
            }
        } else {
            let outcome = (&mut work).await;
            if lease.is_lost() {
                log_lost_and_continued(key, &guard);
            }
            Some(outcome)
        };
        match finished {
            Some(outcome) => Some(outcome),
            // Leaving this block drops the work, before anything else is
            // awaited: it cannot run on while the lease is given back.
            None if options.on_lost == OnLost::Cancel => None,
            None => {
                log_lost_and_continued(key, &guard);
                Some(work.await)
            }
        }
    };
    let Some(outcome) = outcome else {
        metrics::lost(guard.labels());
        let held = guard.held_for();
        tracing::error!(key = %key, held_ms = held.as_millis() as u64, "lock lease lost: cancelled the work");
        // The local deadline passes a clock margin before the store's, so the
        // lease may still be ours: give it back now rather than make the next
        // holder wait out the rest of it.
        if let Err(error) = guard.give_back().await {
            tracing::warn!(key = %key, error = %error.chain(), "could not give back a lost lease; trying again in the background until the store answers or its ttl passes");
        }
        return Err(E::from(Error::LeaseLost {
            key: key.to_owned(),
            held,
        }));
    };
    if let Err(error) = guard.release().await {
        tracing::warn!(
            key = %key,
            error = %error.chain(),
            "could not release the lock after the work finished; trying again in the background until the store answers or its ttl passes"
        );
    }
    outcome
}

/// Resolves when the lease is lost, after marking `lease` lost. Renews the
/// lease meanwhile when asked to; each successful renewal moves the lease's
/// deadline (the guard does that in [`LockGuard::extend`]).
///
/// The lease's local deadline is a hard limit: a renewal still in flight
/// when it passes (the store stalled, the network dropped our packets) does
/// not hold the work up, because by then the store may already have handed
/// the lease to someone else.
pub(crate) async fn watch(lock: &Target, guard: &LockGuard, lease: &Lease) {
    let options = &lock.options;
    let ttl = lock.ttl;
    let store = lock.manager.store();
    let hold_end = options
        .max_hold
        .and_then(|max_hold| guard.started().checked_add(max_hold));
    let mut renewing = options.renew;
    loop {
        let deadline = lease.deadline();
        if !renewing {
            tokio::time::sleep_until(deadline).await;
            lease.mark_lost();
            return;
        }
        let next = Instant::now()
            .checked_add(ttl / 3)
            .map_or(deadline, |next| next.min(deadline));
        tokio::time::sleep_until(next).await;
        let sent = Instant::now();
        if sent >= deadline {
            lease.mark_lost();
            return;
        }
        // Never renew past acquisition + max_hold.
        let extension = match hold_end {
            Some(end) => ttl.min(end.saturating_duration_since(sent)),
            None => ttl,
        };
        if extension.is_zero() {
            tracing::warn!(key = %lock.key, "lock reached its max_hold: no longer renewing");
            renewing = false;
            continue;
        }
        let extended = tokio::select! {
            biased;
            () = tokio::time::sleep_until(deadline) => {
                tracing::warn!(key = %lock.key, "a lock renewal was still in flight at the lease's deadline");
                lease.mark_lost();
                return;
            }
            extended = guard.extend(store_ttl(extension, &**store)) => extended,
        };
        match extended {
            Ok(true) => metrics::renewed(guard.labels()),
            Ok(false) => {
                lease.mark_lost();
                return;
            }
            Err(error) => {
                // Keep trying until the deadline: the store may be back.
                tracing::warn!(key = %lock.key, error = %error.chain(), "could not renew the lock; retrying until its deadline");
            }
        }
    }
}

/// The ERROR (and the metric) a lost lease under [`OnLost::Continue`] is
/// reported with.
fn log_lost_and_continued(key: &str, guard: &LockGuard) {
    metrics::lost(guard.labels());
    tracing::error!(
        key = %key,
        held_ms = guard.held_for().as_millis() as u64,
        "lock lease lost while the work runs on; another holder may run alongside it"
    );
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use crate::{Error, LockManager, OnLost};

    #[test]
    fn work_past_its_deadline_is_not_polled_again_under_cancel() {
        // A process paused past its lease's deadline (SIGSTOP, a stalled
        // VM) resumes with the work ready to go on. Under `OnLost::Cancel`
        // the work must be dropped before it takes another step, even if
        // the timer driver has not yet fired the deadline's timer. Here
        // the work itself blocks the runtime's one thread past the
        // deadline, so no timer fires before the work is polled again.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a runtime");
        let stepped_on = Arc::new(AtomicBool::new(false));
        let outcome = runtime.block_on({
            let stepped_on = Arc::clone(&stepped_on);
            async move {
                let locks = LockManager::memory();
                locks
                    .lock("paused", Duration::from_millis(30))
                    .on_lost(OnLost::Cancel)
                    .run(async move {
                        std::thread::sleep(Duration::from_millis(60));
                        tokio::task::yield_now().await;
                        stepped_on.store(true, Ordering::SeqCst);
                        Ok::<_, Error>(())
                    })
                    .await
            }
        });
        assert!(
            matches!(outcome, Err(Error::LeaseLost { .. })),
            "the lease was lost: {outcome:?}"
        );
        assert!(
            !stepped_on.load(Ordering::SeqCst),
            "the work took a step after its lease's deadline"
        );
    }
}
