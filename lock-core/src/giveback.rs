//! Giving a lease back: the compare-and-delete every release makes (or,
//! while an `at_least` claim must stand, the compare-and-shorten), and the
//! give-back run in the background for a dropped guard or an abandoned
//! acquire, tried again until the store answers, and, when the runtime
//! shuts down first, on a thread of its own ([`at_exit`]).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::metrics::{self, Labels};
use crate::store::store_ttl;
use crate::{LockStore, Result};

/// The one way a lease is given back, awaited by
/// [`LockGuard::release`](crate::LockGuard::release) and
/// run in the background for dropped guards and abandoned acquires: a
/// compare-and-delete on the token, or, while an `at_least` claim must
/// still stand (`hold`), a compare-and-expire shortening the lease to end
/// then.
pub(crate) async fn return_lease(
    store: &dyn LockStore,
    key: &str,
    token: &str,
    hold: Option<Duration>,
) -> Result<bool> {
    match hold {
        // Shortening took effect on the store even when its replicas did not
        // confirm it in time: a shorter lease needs no replica to be safe
        // (one that missed it only keeps the longer lease), and trying again
        // would only push the claim's end further out.
        Some(left) => match store.extend(key, token, left).await {
            Err(crate::Error::NotReplicated { .. }) => Ok(true),
            shortened => shortened,
        },
        None => store.release(key, token).await,
    }
}

/// [`return_lease`] without I/O, when the store can (memory).
#[inline]
pub(crate) fn released_now(
    store: &dyn LockStore,
    key: &str,
    token: &str,
    hold: Option<Duration>,
) -> Option<Result<bool>> {
    match hold {
        Some(_) => None,
        None => store.release_now(key, token),
    }
}

/// Why a lease is being given back from a place that cannot await.
#[derive(Clone, Copy)]
pub(crate) enum GiveBack {
    /// A guard dropped unreleased, after holding the lease this long.
    DroppedGuard { held_ms: u64, labels: Labels },
    /// An acquire dropped (or failed) after its request may have reached the
    /// store: the lease may be ours without anybody knowing.
    AbandonedAcquire,
    /// A release the store failed
    /// ([`LockGuard::release`](crate::LockGuard::release) returned the
    /// error, and metrics counted it), tried again.
    FailedRelease,
}

impl GiveBack {
    fn released(self, key: &str, released: Result<bool>) {
        if let GiveBack::DroppedGuard { labels, .. } = self {
            metrics::released(labels, &released);
        }
        match (self, released) {
            (GiveBack::DroppedGuard { held_ms, .. }, Ok(true)) => {
                tracing::debug!(key = %key, held_ms, "dropped lock released");
            }
            (GiveBack::DroppedGuard { held_ms, .. }, Ok(false)) => tracing::warn!(
                key = %key,
                held_ms,
                "lock overran: its lease ended before the dropped guard released it"
            ),
            (GiveBack::AbandonedAcquire, Ok(true)) => tracing::debug!(
                key = %key,
                "gave back a lease taken by an acquire that was cancelled or failed"
            ),
            // The attempt never took the lease: nothing to give back.
            (GiveBack::AbandonedAcquire, Ok(false)) => {}
            (GiveBack::FailedRelease, Ok(true)) => tracing::debug!(
                key = %key,
                "released the lock on a later try, after the store failed the first"
            ),
            // Either the failed release had in fact taken effect, or the
            // lease ended first: nothing is left either way.
            (GiveBack::FailedRelease, Ok(false)) => tracing::debug!(
                key = %key,
                "nothing left to release on a later try: the failed release took effect after all, or the lease had ended"
            ),
            (_, Err(error)) => tracing::warn!(
                key = %key,
                error = %error.chain(),
                "could not give back a lease: the store kept failing until the lease's ttl passed, so it has ended by now"
            ),
        }
    }
}

/// Gives a lease back from `drop`, where nothing can be awaited: at once when
/// the store can release without I/O, otherwise in a task spawned on the
/// current tokio runtime. `hold` shortens the lease to end then (an
/// `at_least` claim) instead of deleting it.
///
/// A give-back the store fails is tried again, after growing pauses, until
/// the store answers or the lease has ended anyway: `lasts` (the longest
/// the lease can still last) from now, or, for an acquire abandoned with
/// its request perhaps still on its way, from the last moment that request
/// is looked for ([`ABANDONED_RECHECKS`]). A try still in flight then is
/// cut off: past that moment there is nothing left to give back.
///
/// The task holds the store (and so its connections), so that a guard
/// dropped just before the last handle to its store still gives its lease
/// back; never past that moment, however the store fails (at once, at its
/// call bound, or never answering), so a store dropped by the application
/// is let go, connections and all, by the time its leases have ended.
///
/// When no task can run the give-back (no runtime here, or the runtime is
/// shutting down and drops new tasks unpolled), it runs on a thread of its
/// own ([`at_exit`]); when that fails too, the lease ends at its TTL and a
/// WARN says so: a lease is never left behind silently.
pub(crate) fn give_back(
    store: &Arc<dyn LockStore>,
    key: &Arc<str>,
    token: &Arc<str>,
    hold: Option<Duration>,
    lasts: Duration,
    why: GiveBack,
) {
    if let Some(released) = released_now(&**store, key, token, hold) {
        why.released(key, released);
        return;
    }
    // An `at_least` claim ends at a fixed instant: each try shortens the
    // lease to what is left of it (and, once it has passed, releases),
    // never to the whole hold again.
    let hold_until = hold.and_then(|hold| Instant::now().checked_add(hold));
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        // Dropped where no runtime runs (a guard kept past its runtime's
        // `block_on`): given back as one cut off by a shutdown is.
        at_exit(Pending {
            store: Arc::clone(store),
            key: Arc::clone(key),
            token: Arc::clone(token),
            hold_until,
            why,
        });
        return;
    };
    let unfinished = Unfinished(Some(Pending {
        store: Arc::clone(store),
        key: Arc::clone(key),
        token: Arc::clone(token),
        hold_until,
        why,
    }));
    let store = Arc::clone(store);
    let key = Arc::clone(key);
    let token = Arc::clone(token);
    runtime.spawn(async move {
        let unfinished = unfinished;
        // The acquire may still be on its way: a store with a pool of
        // connections can run this give-back before it. The token is this
        // attempt's alone, so looking again can only ever remove our own
        // lease.
        let rechecks = match why {
            GiveBack::AbandonedAcquire => &ABANDONED_RECHECKS[..],
            _ => &[],
        };
        // Past this, the lease has ended whatever the store did: its TTL as
        // the store keeps it, in whole steps of its resolution and up to one
        // step more (a store keeping whole seconds may keep a 1.5 s lease
        // for 3). One that overflows never ends (`Duration::MAX`, "no
        // bound").
        let lasts = store_ttl(lasts, &*store).saturating_add(store.ttl_resolution());
        let landed_by: Duration = rechecks.iter().sum();
        let ended = Instant::now()
            .checked_add(landed_by)
            .and_then(|landed| landed.checked_add(lasts));
        let mut rechecks = rechecks.iter();
        let mut retry = RETRY_FIRST;
        let released = loop {
            let hold = hold_left(hold_until, &*store);
            let trying = return_lease(&*store, &key, &token, hold);
            // A safety deadline is raced against the call in flight, not
            // checked only between calls: a store that never answers, or
            // answers only at a call bound longer than the lease, would
            // otherwise keep the task, and the store, past it.
            let released = match ended {
                Some(ended) => tokio::time::timeout_at(ended, trying)
                    .await
                    .unwrap_or_else(|_| {
                        Err(crate::Error::store(
                            "release",
                            &*key,
                            "no answer before the lease's ttl passed",
                        ))
                    }),
                None => trying.await,
            };
            let pause = match &released {
                Ok(false) => match rechecks.next() {
                    Some(pause) => *pause,
                    None => break released,
                },
                Ok(true) => break released,
                // The store failed, so the lease may still be there: try
                // again while it can be.
                Err(_) => {
                    let pause = retry;
                    retry = (retry * 2).min(RETRY_MOST);
                    pause
                }
            };
            if ended.is_some_and(|ended| Instant::now() + pause >= ended) {
                break released;
            }
            tokio::time::sleep(pause).await;
        };
        why.released(&key, released);
        unfinished.finish();
    });
}

/// When the give-back of an abandoned acquire found nothing, it looks again
/// after these pauses: long enough for a request already sent to land, the
/// last beyond the stores' default 3 s call timeout.
const ABANDONED_RECHECKS: [Duration; 3] = [
    Duration::from_millis(20),
    Duration::from_millis(250),
    Duration::from_secs(4),
];

/// The pause before a give-back the store failed is tried again; each
/// failure doubles it, up to [`RETRY_MOST`].
const RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest pause between tries of a give-back the store keeps failing.
const RETRY_MOST: Duration = Duration::from_secs(2);

/// What is left of an `at_least` claim ending at `until`, as `store` keeps
/// it; `None` once it has passed (the lease is then deleted).
fn hold_left(until: Option<Instant>, store: &dyn LockStore) -> Option<Duration> {
    until
        .map(|until| until.saturating_duration_since(Instant::now()))
        .filter(|left| !left.is_zero())
        .map(|left| store_ttl(left, store))
}

/// Carried by a give-back task: if the task is dropped before it finishes
/// (its runtime shut down, as one under `#[tokio::main]` does the moment
/// `main` returns), gives the lease back on a thread of its own
/// ([`at_exit`]) before the shutdown goes on.
struct Unfinished(Option<Pending>);

impl Unfinished {
    fn finish(mut self) {
        self.0 = None;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if let Some(pending) = self.0.take() {
            at_exit(pending);
        }
    }
}

/// A give-back its runtime's shutdown cut off: what [`at_exit`] needs.
struct Pending {
    store: Arc<dyn LockStore>,
    key: Arc<str>,
    token: Arc<str>,
    hold_until: Option<Instant>,
    why: GiveBack,
}

/// The longest a give-back cut off by its runtime's shutdown may take,
/// opening the store again included: that shutdown, and so the exit of a
/// process whose `#[tokio::main]` returned, waits this long at most for a
/// store that does not answer.
const AT_EXIT: Duration = Duration::from_secs(2);

/// The stores (by address) whose give-back at exit went unanswered for all
/// of [`AT_EXIT`], and when: for as long again, the others to that store
/// are skipped (a shutdown cutting off many give-backs to a store that is
/// down waits once, not once each).
static UNANSWERED: Mutex<Vec<(usize, std::time::Instant)>> = Mutex::new(Vec::new());

/// Gives back a lease whose give-back task the runtime dropped unfinished
/// (it shut down), or that was dropped where no runtime runs: on a thread
/// and a runtime of its own, through the store
/// opened again ([`LockStore::reopen`]), within [`AT_EXIT`]. The runtime's
/// shutdown drops its tasks on its own threads and waits for them, so it
/// waits for this too: a guard dropped as `#[tokio::main]` returns is given
/// back before the process exits.
///
/// Its own thread, because the runtime's: a new runtime cannot be started
/// inside one, and the store's connections, on the runtime shutting down,
/// can no longer be driven. When the store cannot open itself again, or
/// does not answer in time, the lease ends at its TTL, and a WARN says so.
fn at_exit(pending: Pending) {
    let Pending {
        store,
        key,
        token,
        hold_until,
        why,
    } = pending;
    let address = Arc::as_ptr(&store).cast::<()>() as usize;
    let recently_unanswered = {
        let mut unanswered = UNANSWERED.lock().unwrap_or_else(PoisonError::into_inner);
        unanswered.retain(|(_, when)| when.elapsed() < AT_EXIT);
        unanswered.iter().any(|(store, _)| *store == address)
    };
    let unanswered = || {
        UNANSWERED
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((address, std::time::Instant::now()));
    };
    // A task dropped as its thread unwinds from a panic: no shutdown to
    // hold up, and no thread to block.
    let reopening = match store.reopen() {
        Some(reopening) if !std::thread::panicking() && !recently_unanswered => reopening,
        _ => {
            tracing::warn!(
                key = %key,
                "a dropped lock could not be given back on a tokio runtime (it had shut down, or none ran where it was dropped), and its store cannot open a connection of its own: the lease ends at its ttl"
            );
            return;
        }
    };
    let hold = hold_left(hold_until, &*store);
    let (send, answer) = std::sync::mpsc::sync_channel(1);
    let giving = Arc::clone(&key);
    let spawned = std::thread::Builder::new()
        .name("lock-core-exit".to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build();
            let released = match runtime {
                Ok(runtime) => {
                    let released = runtime.block_on(async {
                        let giving_back = async {
                            let store = reopening.await?;
                            return_lease(&*store, &giving, &token, hold).await
                        };
                        tokio::time::timeout(AT_EXIT, giving_back).await.ok()
                    });
                    // Never wait for a blocking task (a DNS lookup) left
                    // running: the deadline is the bound.
                    runtime.shutdown_background();
                    released
                }
                Err(e) => Some(Err(crate::Error::store("release", &*giving, e))),
            };
            let _ = send.send(released);
        });
    let released = match spawned {
        Ok(_) => answer
            .recv_timeout(AT_EXIT + Duration::from_millis(500))
            .unwrap_or(None),
        Err(e) => Some(Err(crate::Error::store("release", &*key, e))),
    };
    match released {
        Some(Ok(released)) => why.released(&key, Ok(released)),
        Some(Err(error)) => tracing::warn!(
            key = %key,
            error = %error.chain(),
            "a dropped lock could not be given back on a tokio runtime (it had shut down, or none ran where it was dropped), and giving it back on a connection of its own failed: the lease ends at its ttl"
        ),
        None => {
            unanswered();
            tracing::warn!(
                key = %key,
                timeout_ms = AT_EXIT.as_millis() as u64,
                "a dropped lock could not be given back on a tokio runtime (it had shut down, or none ran where it was dropped), and the store did not answer a connection of its own in time: the lease ends at its ttl"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use super::*;
    use crate::store::{AcquireRequest, Attempt, BoxFuture};
    use crate::{Error, Holder};

    /// A store that fails every call: after `fails_after`, or never
    /// answering at all (`None`), as a server that is gone does, a call
    /// bound or none. It says when the last handle to it goes, and its
    /// connections with it.
    struct Failing {
        fails_after: Option<Duration>,
        gone: Arc<AtomicBool>,
        /// What it opens as again ([`LockStore::reopen`]), if it can.
        reopens_as: Option<Arc<dyn LockStore>>,
    }

    impl Drop for Failing {
        fn drop(&mut self) {
            self.gone.store(true, Ordering::SeqCst);
        }
    }

    impl Failing {
        fn fail<T: Send + 'static>(
            &self,
            operation: &'static str,
        ) -> BoxFuture<'static, Result<T>> {
            let fails_after = self.fails_after;
            Box::pin(async move {
                match fails_after {
                    Some(after) => {
                        tokio::time::sleep(after).await;
                        Err(Error::store(operation, "k", "the server is gone"))
                    }
                    None => std::future::pending().await,
                }
            })
        }
    }

    impl LockStore for Failing {
        fn acquire<'a>(&'a self, _: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
            self.fail("acquire")
        }
        fn release<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<bool>> {
            self.fail("release")
        }
        fn extend<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: Duration,
        ) -> BoxFuture<'a, Result<bool>> {
            self.fail("extend")
        }
        fn force_release<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool>> {
            self.fail("force release")
        }
        fn holder<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
            self.fail("read the holder of")
        }
        fn is_shared(&self) -> bool {
            true
        }
        fn max_ttl(&self) -> Duration {
            Duration::from_secs(3600)
        }
        fn reopen(&self) -> Option<BoxFuture<'static, Result<Arc<dyn LockStore>>>> {
            let again = self.reopens_as.clone()?;
            Some(Box::pin(async move { Ok(again) }))
        }
    }

    /// A store that answers every release at once, counting them.
    struct Answering(Arc<AtomicUsize>);

    impl LockStore for Answering {
        fn acquire<'a>(&'a self, _: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
            Box::pin(async { Ok(Attempt::Acquired { fence: None }) })
        }
        fn release<'a>(&'a self, _: &'a str, _: &'a str) -> BoxFuture<'a, Result<bool>> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(true) })
        }
        fn extend<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: Duration,
        ) -> BoxFuture<'a, Result<bool>> {
            Box::pin(async { Ok(true) })
        }
        fn force_release<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<bool>> {
            Box::pin(async { Ok(true) })
        }
        fn holder<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
            Box::pin(async { Ok(None) })
        }
        fn is_shared(&self) -> bool {
            true
        }
        fn max_ttl(&self) -> Duration {
            Duration::from_secs(3600)
        }
    }

    /// Gives a lease back from inside `block_on` of a current-thread
    /// runtime, as a guard dropped as `#[tokio::main]` returns does, then
    /// shuts the runtime down: the give-back task never runs on it.
    fn given_back_as_main_returns(store: Arc<dyn LockStore>) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let (key, token): (Arc<str>, Arc<str>) = (Arc::from("k"), Arc::from("t"));
        let lasts = Duration::from_secs(60);
        runtime.block_on(async {
            give_back(&store, &key, &token, None, lasts, GiveBack::FailedRelease);
        });
        drop(runtime);
    }

    // The cron binary's `main`: the runtime shuts down before the task
    // spawned to give the lease back has run, and the lease must not be
    // left to its TTL (the next run would find it held). The give-back is
    // made through the store opened again, before the shutdown ends.
    #[test]
    fn a_give_back_cut_off_by_the_runtimes_shutdown_is_made_before_the_shutdown_ends() {
        let released = Arc::new(AtomicUsize::new(0));
        given_back_as_main_returns(Arc::new(Failing {
            fails_after: None,
            gone: Arc::default(),
            reopens_as: Some(Arc::new(Answering(Arc::clone(&released)))),
        }));
        assert_eq!(
            released.load(Ordering::SeqCst),
            1,
            "the lease was given back through the store opened again, before the runtime's drop returned"
        );
    }

    // A store that is down at exit must not hang the process: the
    // shutdown waits for the give-back at most `AT_EXIT` (and a little
    // for the thread), then lets the lease end at its TTL.
    #[test]
    fn a_store_that_does_not_answer_at_exit_holds_the_shutdown_up_for_at_most_the_deadline() {
        let silent: Arc<dyn LockStore> = Arc::new(Failing {
            fails_after: None,
            gone: Arc::default(),
            reopens_as: None,
        });
        let started = std::time::Instant::now();
        given_back_as_main_returns(Arc::new(Failing {
            fails_after: None,
            gone: Arc::default(),
            reopens_as: Some(silent),
        }));
        let took = started.elapsed();
        assert!(
            took >= AT_EXIT && took < AT_EXIT + Duration::from_secs(1),
            "the shutdown waited {took:?} for a store that never answers: {AT_EXIT:?}, no less \
             (the give-back was tried) and not much more"
        );
    }

    // A give-back holds its store, so a guard dropped just before its
    // manager still gives its lease back. A store that fails forever
    // must not be kept that way, with its connections, past the moment the
    // lease has ended anyway: whether each call fails at once, fails only
    // at a call bound longer than the lease, or never answers.
    #[tokio::test(start_paused = true)]
    async fn a_give_back_whose_store_fails_forever_lets_the_store_go_by_the_leases_ttl() {
        let ttl = Duration::from_secs(2);
        for fails_after in [
            Some(Duration::from_millis(10)),
            Some(Duration::from_secs(3)),
            None,
        ] {
            let gone = Arc::new(AtomicBool::new(false));
            let store: Arc<dyn LockStore> = Arc::new(Failing {
                fails_after,
                gone: Arc::clone(&gone),
                reopens_as: None,
            });
            let (key, token): (Arc<str>, Arc<str>) = (Arc::from("k"), Arc::from("t"));
            give_back(&store, &key, &token, None, ttl, GiveBack::FailedRelease);
            let kept_for = ttl + store.ttl_resolution();
            drop(store);
            tokio::time::sleep(kept_for).await;
            for _ in 0..10 {
                tokio::task::yield_now().await;
            }
            assert!(
                gone.load(Ordering::SeqCst),
                "a store whose calls fail after {fails_after:?} (None: never answer) is let go \
                 by the lease's {ttl:?} ttl"
            );
        }
    }
}
