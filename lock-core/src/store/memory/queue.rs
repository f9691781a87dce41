//! A key's waiters, first come first, and when a release hands the lease to the first in turn.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

use super::token::StoredToken;
use crate::store::Woken;

/// How often, at most, a key's release hands the lease over in turn while
/// a stream of releases finds waiters queued. In between, a waiter is woken
/// to try again and a running task may take the lease first: under heavy
/// contention that keeps the lease with tasks already running instead of
/// switching tasks on every release, and the handoffs in turn keep every
/// waiter's wait bounded.
pub(super) const FAIR_EVERY: Duration = Duration::from_micros(500);

/// A key's waiters, first come first.
pub(super) struct Queue {
    waiters: VecDeque<Arc<Waiter>>,
    /// From when the next release hands the lease to the first waiter
    /// rather than waking it to try again (see [`Queue::take_first`]).
    fair_at: Instant,
}

/// One task waiting for a key.
pub(super) struct Waiter {
    /// Whether it waits for the read side: readers at the head of the queue
    /// are let in together.
    reader: bool,
    /// What the lease is written as when a release hands it straight to
    /// this waiter; `None` for a waiter that is only woken to try again.
    grant: Option<Grant>,
    state: Mutex<WaiterState>,
}

/// The waiter's attempt, kept to be written as the lease it is handed.
pub(super) struct Grant {
    pub(super) token: StoredToken,
    pub(super) ttl: Duration,
    pub(super) fenced: bool,
}

#[derive(Default)]
struct WaiterState {
    /// The waiting task's waker, from its last poll.
    waker: Option<Waker>,
    /// Set, under the shard lock, when a release takes the waiter off the
    /// queue.
    woken: Option<Woken>,
    /// Whether the waiting task has read that it was handed the lease: from
    /// then on the lease is its own to look after. A wake-up to try again is
    /// never marked: read or not, it passes on when the waiter goes (the
    /// task may have read it only while looking for a handover, and then
    /// acts on it no more than on any other), which at worst wakes the next
    /// waiter once more than needed, and never hands over a key in use.
    seen: bool,
}

impl Queue {
    /// An empty queue, made for a waiter whose attempt was sent at `sent`:
    /// the first handoff is due [`FAIR_EVERY`] after that.
    pub(super) fn new(sent: Instant) -> Queue {
        Queue {
            waiters: VecDeque::new(),
            fair_at: sent + FAIR_EVERY,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiters.is_empty()
    }

    /// Whether the first waiter waits for the read side; `None` when
    /// nobody waits.
    pub(super) fn first_is_reader(&self) -> Option<bool> {
        self.waiters.front().map(|waiter| waiter.reader)
    }

    /// Whether a writer waits: new readers then wait behind it, so that a
    /// stream of overlapping readers cannot starve it.
    pub(super) fn has_writer(&self) -> bool {
        self.waiters.iter().any(|waiter| !waiter.reader)
    }

    /// Queues a new waiter at the back, a reader or a writer: one to be
    /// handed the lease as `grant` says, or, with `None`, only woken to try
    /// again.
    pub(super) fn push(&mut self, reader: bool, grant: Option<Grant>) -> Arc<Waiter> {
        let waiter = Arc::new(Waiter {
            reader,
            grant,
            state: Mutex::default(),
        });
        self.waiters.push_back(Arc::clone(&waiter));
        waiter
    }

    /// Takes `waiter` off the queue, if it is still on it.
    pub(super) fn leave(&mut self, waiter: &Arc<Waiter>) {
        self.waiters.retain(|queued| !Arc::ptr_eq(queued, waiter));
    }

    /// Takes the first waiter off the queue, for a key whose lease is gone,
    /// and returns its waker, to wake once the shard lock is dropped; when
    /// it is a reader, every reader queued right behind it too, the same
    /// way, since they can all hold the key together.
    ///
    /// A waiter that takes leases directly is handed this one (`hand`
    /// writes it under the waiter's [`Grant`], as a reader's lease when its second
    /// argument says so, and says so) when its turn is
    /// due: [`FAIR_EVERY`] after the queue was made or the last handoff, so
    /// a waiter on a quiet key, or the first release after a pause, hands
    /// over at once; and always for a lease given back by a waiter that went
    /// away (`passed_on`), which no running task is after. Otherwise, and
    /// for waiters that only want to know, the waiter is woken to try again.
    pub(super) fn take_first(
        &mut self,
        now: Instant,
        passed_on: bool,
        mut hand: impl FnMut(&Grant, bool) -> Woken,
    ) -> Option<Waker> {
        let first = self.waiters.pop_front()?;
        let due = passed_on || now >= self.fair_at;
        let mut waker = first.take_turn(due, &mut hand);
        if first.reader && self.waiters.front().is_some_and(|waiter| waiter.reader) {
            let mut batch: Vec<Waker> = waker.into_iter().collect();
            while self.waiters.front().is_some_and(|waiter| waiter.reader) {
                let Some(next) = self.waiters.pop_front() else {
                    break;
                };
                batch.extend(next.take_turn(due, &mut hand));
            }
            waker = Some(Waker::from(Arc::new(Batch(batch))));
        }
        if due && first.grant.is_some() {
            self.fair_at = now + FAIR_EVERY;
        }
        waker
    }
}

/// The wakers of readers a release lets in together, as one waker: a
/// release's wake-up stays one `Option<Waker>`, as small as it was before
/// there were readers, and only a batch of readers pays for this.
struct Batch(Vec<Waker>);

impl std::task::Wake for Batch {
    fn wake(self: Arc<Self>) {
        match Arc::try_unwrap(self) {
            Ok(batch) => batch.0.into_iter().for_each(Waker::wake),
            Err(shared) => shared.wake_by_ref(),
        }
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.iter().for_each(Waker::wake_by_ref);
    }
}

impl Waiter {
    fn state(&self) -> MutexGuard<'_, WaiterState> {
        // Nothing panics while holding it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This waiter's turn, just taken off the queue: handed the lease
    /// (`hand` writes it) when it takes leases directly and the turn is
    /// `due`, otherwise only woken to try again. Returns its waker.
    fn take_turn(&self, due: bool, hand: &mut impl FnMut(&Grant, bool) -> Woken) -> Option<Waker> {
        let mut state = self.state();
        // A reader is handed the key whether or not the turn is due: only
        // woken, its retry would find the writers queued behind it and wait
        // behind them, on a key nobody holds.
        state.woken = Some(match &self.grant {
            Some(grant) if due || self.reader => hand(grant, self.reader),
            _ => Woken::Released,
        });
        state.waker.take()
    }

    /// Whether this waiter waits for the read side.
    pub(super) fn is_reader(&self) -> bool {
        self.reader
    }

    /// The waiting task's side: what the release that took this waiter off
    /// the queue did for it, once one has; read, from then on what it was
    /// handed is the task's own to look after.
    pub(super) fn poll_woken(&self, cx: &mut Context<'_>) -> Poll<Woken> {
        let mut state = self.state();
        if let Some(woken) = state.woken {
            state.seen = matches!(woken, Woken::Granted { .. });
            return Poll::Ready(woken);
        }
        match &mut state.waker {
            Some(waker) => waker.clone_from(cx.waker()),
            none => *none = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    /// Whether the waiting task has read that it was handed the lease.
    pub(super) fn seen(&self) -> bool {
        self.state().seen
    }

    /// What the release that took this waiter off the queue did for it, if
    /// one has.
    pub(super) fn woken(&self) -> Option<Woken> {
        self.state().woken
    }

    /// The token a lease handed to this waiter is written under; `None` for
    /// a waiter that is only woken.
    pub(super) fn grant_token(&self) -> Option<&StoredToken> {
        self.grant.as_ref().map(|grant| &grant.token)
    }
}

#[cfg(test)]
mod tests {
    use super::super::MemoryStore;
    use super::super::tests::{TTL, acquire, held_by_a};
    use super::*;
    use crate::store::{AcquireRequest, Attempt, Wakeup};

    /// Queues `token` behind the holder of `key`, asking to be handed the
    /// lease (as a single-permit `Lock` does) or only woken.
    fn wait(store: &MemoryStore, key: &str, token: &str, grant: bool) -> Wakeup {
        let mut request = AcquireRequest::new(key, token, TTL).waking().fencing();
        request.local.grant = grant;
        match store.try_acquire(request) {
            Attempt::Held {
                wakeup: Some(wakeup),
                ..
            } => wakeup,
            other => panic!("{key} should be held, with a wakeup: {other:?}"),
        }
    }

    fn holder_token(store: &MemoryStore, key: &str) -> Option<String> {
        store
            .holder_sync(key)
            .map(|holder| holder.token().to_owned())
    }

    /// Lets the next release hand the lease over in turn.
    fn handoff_due() {
        std::thread::sleep(FAIR_EVERY + Duration::from_millis(1));
    }

    #[test]
    fn a_release_hands_the_lease_to_the_first_waiter_in_order() {
        let store = held_by_a(TTL);
        let mut b = wait(&store, "k", "b", true);
        let mut c = wait(&store, "k", "c", true);
        assert!(b.woken_now().is_none() && c.woken_now().is_none());

        handoff_due();
        assert!(store.release_sync("k", "a"));
        // Written under b's token before anyone could barge in.
        assert_eq!(holder_token(&store, "k").as_deref(), Some("b"));
        assert!(
            matches!(acquire(&store, "k", "x", TTL), Attempt::Held { .. }),
            "a newcomer cannot take a lease already handed over"
        );
        let Some(Woken::Granted {
            fence: Some(b_fence),
            ..
        }) = b.woken_now()
        else {
            panic!("b is handed the lease, with a fencing token");
        };
        assert!(c.woken_now().is_none(), "c is still second in line");

        handoff_due();
        assert!(store.release_sync("k", "b"));
        assert_eq!(holder_token(&store, "k").as_deref(), Some("c"));
        let Some(Woken::Granted {
            fence: Some(c_fence),
            ..
        }) = c.woken_now()
        else {
            panic!("c is handed the lease next");
        };
        assert!(c_fence > b_fence, "fencing tokens keep increasing");
        drop((b, c));
        assert_eq!(
            holder_token(&store, "k").as_deref(),
            Some("c"),
            "waiters that saw their grant leave the lease to their guards"
        );
    }

    #[test]
    fn a_lease_handed_to_a_waiter_that_went_away_is_given_back_and_passed_on() {
        let store = held_by_a(TTL);
        let b = wait(&store, "k", "b", true);
        let mut c = wait(&store, "k", "c", true);
        handoff_due();
        assert!(store.release_sync("k", "a"));
        assert_eq!(holder_token(&store, "k").as_deref(), Some("b"));
        // b's task was cancelled before it saw the lease was its own.
        drop(b);
        assert_eq!(holder_token(&store, "k").as_deref(), Some("c"));
        assert!(matches!(c.woken_now(), Some(Woken::Granted { .. })));
        drop(c);
        assert!(store.release_sync("k", "c"));
        assert!(store.is_empty(), "nothing is left behind");

        // With nobody after it, the lease goes back to being free.
        assert!(matches!(
            acquire(&store, "k", "a", TTL),
            Attempt::Acquired { .. }
        ));
        let b = wait(&store, "k", "b", true);
        handoff_due();
        assert!(store.force_release_sync("k"));
        drop(b);
        assert!(store.holder_sync("k").is_none());
        assert!(store.is_empty());
    }

    #[test]
    fn a_wake_to_retry_that_went_unseen_goes_to_the_next_waiter() {
        let store = held_by_a(TTL);
        let b = wait(&store, "k", "b", false);
        let mut c = wait(&store, "k", "c", false);
        assert!(store.release_sync("k", "a"));
        assert!(store.holder_sync("k").is_none(), "only woken, not handed");
        drop(b);
        assert!(
            matches!(c.woken_now(), Some(Woken::Released)),
            "the free key's wake-up is passed on"
        );
    }

    #[test]
    fn a_waiter_that_goes_away_leaves_the_queue() {
        let store = held_by_a(Duration::from_millis(1));
        let b = wait(&store, "k", "b", true);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.purge_expired(), 1, "the waiter keeps the slot alive");
        drop(b);
        assert!(store.is_empty(), "the last waiter to leave takes the slot");

        // A release with nobody queued any more frees the key outright.
        assert!(matches!(
            acquire(&store, "k", "a", TTL),
            Attempt::Acquired { .. }
        ));
        drop(wait(&store, "k", "b", true));
        assert!(store.release_sync("k", "a"));
        assert!(store.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn quick_releases_wake_waiters_and_a_handoff_comes_in_turn() {
        let store = held_by_a(TTL);
        let mut b = wait(&store, "k", "b", true);
        let mut c = wait(&store, "k", "c", true);
        // Released at once: b is woken to try again, and anyone running may
        // take the key first.
        assert!(store.release_sync("k", "a"));
        assert!(matches!(b.woken_now(), Some(Woken::Released)));
        assert!(store.holder_sync("k").is_none());
        assert!(matches!(
            acquire(&store, "k", "x", TTL),
            Attempt::Acquired { .. }
        ));
        // Once the turn is due, the next release hands over to c, who has
        // been waiting all along.
        tokio::time::advance(FAIR_EVERY).await;
        assert!(store.release_sync("k", "x"));
        assert_eq!(holder_token(&store, "k").as_deref(), Some("c"));
        assert!(matches!(c.woken_now(), Some(Woken::Granted { .. })));
        // And the turn after that is FAIR_EVERY later.
        let mut d = wait(&store, "k", "d", true);
        assert!(store.release_sync("k", "c"));
        assert!(matches!(d.woken_now(), Some(Woken::Released)));
    }

    #[test]
    fn a_wake_to_retry_read_while_looking_back_for_a_handover_still_passes_on() {
        // A waiting task's next round queues a new waiter, then looks at
        // its last round's for a lease handed over meanwhile. A release in
        // between only woke that old waiter to try again: the look-back must
        // not swallow that wake-up, or the task's new waiter sleeps out its
        // nap on a free key.
        let store = held_by_a(TTL);
        let mut old = wait(&store, "k", "b", true);
        let mut new = wait(&store, "k", "b", true);
        assert!(
            store.release_sync("k", "a"),
            "released before a turn is due"
        );
        assert!(old.granted().is_none(), "only woken, not handed the lease");
        drop(old);
        assert!(
            new.woken_now().is_some(),
            "the wake-up passes on to the task's new waiter"
        );
    }
}
