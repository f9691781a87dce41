//! [`Observe`]: the stream of an election's leaders.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::time::Instant;

use super::{LOCAL, Leader, campaign_backoff, local_key};
use crate::store::Wakeup;
use crate::{Lock, LockStore};

/// How often an observer reads the leader on a store that announces no
/// changes across processes (memcached).
const POLL_EVERY: Duration = Duration::from_secs(1);

/// How long after the leader's lease should have run out an observer reads
/// again: the store's clock may run a little slower than this one's.
const EXPIRY_SLACK: Duration = Duration::from_millis(20);

/// How long after a read that found nobody leading an observer reads once
/// more, at most (see [`Observer::recheck`]).
const RECHECK_WITHIN: Duration = Duration::from_secs(1);

/// Every change of an election's leader: [`Election::observe`](crate::Election::observe).
///
/// A [`Stream`] of `Option<Leader>` that never ends. Dropping it stops
/// observing and leaves nothing behind.
#[must_use = "streams do nothing unless polled"]
pub struct Observe {
    next: Pin<Box<dyn Future<Output = (Observer, Option<Leader>)> + Send>>,
}

impl fmt::Debug for Observe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Observe")
    }
}

impl Observe {
    pub(super) fn new(lock: Lock) -> Observe {
        let store = Arc::clone(lock.target.manager.store());
        let key = Arc::clone(&lock.target.key);
        let local = local_key(&*store, &key);
        let observer = Observer {
            store,
            key,
            local,
            shown: None,
            highest: 0,
            until: None,
            recheck: (lock.ttl() / 3).min(RECHECK_WITHIN),
            found_nobody: false,
        };
        Observe {
            next: Box::pin(observer.next()),
        }
    }
}

impl Observe {
    /// The next change: who leads now, `None` when nobody does. The first
    /// call says who leads when it is made. What
    /// [`StreamExt::next`](https://docs.rs/futures/latest/futures/stream/trait.StreamExt.html#method.next)
    /// gives, without a stream library.
    pub async fn next_change(&mut self) -> Option<Leader> {
        let (observer, leader) = self.next.as_mut().await;
        self.next = Box::pin(observer.next());
        leader
    }
}

impl Stream for Observe {
    type Item = Option<Leader>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let (observer, leader) = std::task::ready!(self.next.as_mut().poll(cx));
        self.next = Box::pin(observer.next());
        Poll::Ready(Some(leader))
    }
}

/// An observer between two changes.
struct Observer {
    store: Arc<dyn LockStore>,
    key: Arc<str>,
    /// The key of this election among this process's observers.
    local: String,
    /// The last term shown (`Some(None)`: nobody led), `None` before the
    /// first item.
    shown: Option<Option<u64>>,
    /// The highest term shown: a lower one read later is a stale read.
    highest: u64,
    /// What the next wait waits for, registered before the last read (so a
    /// change after that read is not missed): signals and a time to read
    /// again.
    until: Option<Until>,
    /// How long after a read that found nobody leading to read once more:
    /// a third of the election's TTL (a live leader renews that often), at
    /// most [`RECHECK_WITHIN`]. A read can miss a live leader (a store
    /// whose holder read raced the leader's renewal), and a store announces
    /// new leaders, not leaders that went on leading: without this second
    /// look, the `None` would stand for the rest of the term.
    recheck: Duration,
    /// Whether the last read found nobody leading: the read after it is
    /// the second look, and no third follows.
    found_nobody: bool,
}

/// What an observer waits for before reading again.
struct Until {
    signals: Vec<Wakeup>,
    /// The leader's lease runs out then (a dead leader announces nothing),
    /// or the store is read at intervals, or after a failed read.
    at: Option<Instant>,
}

impl Until {
    /// Waits, and hands back the signals: they stay registered until the
    /// next ones are (see [`Observer::next`]).
    async fn wait(self) -> Vec<Wakeup> {
        let Until { mut signals, at } = self;
        let sleep = async {
            match at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        let signal = std::future::poll_fn(|cx| {
            for signal in &mut signals {
                if Pin::new(&mut *signal).poll(cx).is_ready() {
                    return Poll::Ready(());
                }
            }
            Poll::Pending
        });
        tokio::select! {
            () = signal => {}
            () = sleep => {}
        }
        signals
    }
}

impl Observer {
    /// Waits for the next change, and returns it.
    async fn next(mut self) -> (Observer, Option<Leader>) {
        let mut backoff = campaign_backoff();
        loop {
            // The last wait's signals stay registered until this round's
            // are: a store that listens per key (Redis) would otherwise
            // stop listening and start again, and starting wakes every
            // observer of the key to read again, round after round.
            let previous = match self.until.take() {
                Some(until) => until.wait().await,
                None => Vec::new(),
            };
            // Registered before the read: a change the store announces
            // after it wakes the next wait.
            let mut signals = vec![Wakeup::observer(LOCAL.observe(&self.local))];
            let announces = match self.store.observe(&self.key) {
                Some(signal) => {
                    signals.push(signal);
                    true
                }
                None => !self.store.is_shared(),
            };
            drop(previous);
            let leader = match self.store.holder(&self.key).await {
                Ok(holder) => holder.as_ref().and_then(Leader::of),
                Err(error) => {
                    tracing::warn!(key = %self.key, error = %error.chain(), "could not read the election's leader; reading again");
                    let at = Instant::now().checked_add(backoff.next_pause());
                    self.until = Some(Until { signals, at });
                    continue;
                }
            };
            backoff = campaign_backoff();
            let expires = leader.as_ref().and_then(|leader| {
                Instant::now().checked_add(leader.remaining_ttl().saturating_add(EXPIRY_SLACK))
            });
            let poll = (!announces)
                .then(|| Instant::now().checked_add(POLL_EVERY))
                .flatten();
            let recheck = (leader.is_none() && !self.found_nobody)
                .then(|| Instant::now().checked_add(self.recheck))
                .flatten();
            self.found_nobody = leader.is_none();
            let at = [expires, poll, recheck].into_iter().flatten().min();
            self.until = Some(Until { signals, at });
            let term = leader.as_ref().map(Leader::term);
            let changed = match (self.shown, term) {
                (None, _) => true,
                (Some(None), None) => false,
                (Some(Some(_)), None) => true,
                // After nobody, the term shown before it leads again (the
                // read that found nobody missed it): show it again.
                (Some(None), Some(term)) => term >= self.highest,
                // Terms only grow: a lower one is a stale read.
                (Some(Some(_)), Some(term)) => term > self.highest,
            };
            if changed {
                self.shown = Some(term);
                self.highest = self.highest.max(term.unwrap_or(0));
                return (self, leader);
            }
        }
    }
}
