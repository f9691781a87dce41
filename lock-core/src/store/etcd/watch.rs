//! The store's one watch stream: a watch per key that this process waits
//! for or observes, multiplexed on one gRPC stream, waking the key's
//! waiters when the key is deleted (a release, a force-release, or its
//! lease expiring), or one of its companions is: a reader's key, a waiting
//! writer's claim (each watch covers the name's range, see `keys`). A new
//! writer of the key wakes its observers only (an election's, see
//! [`LockStore::observe`](crate::LockStore::observe)).
//!
//! A waiter asks for its key to be watched from just after the revision at
//! which it found the key held, so a delete between its attempt and the
//! watch's creation is still delivered: etcd replays history from a start
//! revision. The same replay makes a broken stream harmless: when it breaks
//! (a leader change, a member restarting) it is opened again after a growing
//! pause, and every watch resumes just after the last delete it delivered,
//! so nothing is missed and nobody is woken for nothing.
//!
//! ```text
//! stream:  up ──── break ─ pause ─ open fails ─ pause ─ open ── up ───
//! waiters: wait ───────────────────────────────────────────── release: one wakes
//! ```
//!
//! Waking waiters at the break instead would send each of them into an
//! attempt during the outage (an error that ends its wait) and, later, into
//! two raft writes for a lock that is still held.
//!
//! Only a watch the cluster ended for one key wakes that key's waiters, and
//! only when a delete may have been missed (its history was compacted).
//! Watches of keys nobody waits for any more are cancelled by this task,
//! which wakes nobody. A watch refused because the stream's authentication
//! token expired has the token refreshed and the stream opened again.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, EventType, GetOptions, WatchOptions, WatchResponse, WatchStream,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::keys::{self, Stored};
use crate::store::kit::{Background, Backoff, Deadline, Waiters};

/// How often watches of keys nobody waits for are cancelled.
const TIDY_EVERY: Duration = Duration::from_secs(5);

/// Bounds of the pause between attempts to open the stream again.
const REOPEN_MIN: Duration = Duration::from_millis(50);
const REOPEN_MAX: Duration = Duration::from_secs(1);

/// Bounds of the extra pause after authenticating again failed.
const REFUSED_MIN: Duration = Duration::from_secs(1);
const REFUSED_MAX: Duration = Duration::from_secs(30);
/// A stream that stayed up this long was healthy: the next attempt after it
/// ends comes after the shortest pause again.
const HEALTHY: Duration = Duration::from_secs(10);

/// Asks the watch task to watch a key.
#[derive(Clone)]
pub(super) struct Watches {
    requests: mpsc::UnboundedSender<(String, i64)>,
}

impl Watches {
    /// Starts the watch task for `client`'s cluster among `tasks`, waking
    /// `waiters`; `timeout` bounds opening the stream and refreshing its
    /// token.
    pub(super) fn start(
        client: Client,
        waiters: Arc<Waiters>,
        timeout: Duration,
        tasks: &mut Background,
    ) -> Watches {
        let (requests, incoming) = mpsc::unbounded_channel();
        tasks.spawn(run(client, waiters, incoming, timeout));
        Watches { requests }
    }

    /// Watches `key` from `revision` on (if it is not watched already).
    pub(super) fn watch(&self, key: &str, revision: i64) {
        let _ = self.requests.send((key.to_owned(), revision));
    }
}

/// Why a stream was given up.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// It broke, could not be opened, or the cluster ended a watch on it
    /// for a reason other than compaction: open it again.
    Broken,
    /// The cluster refused a watch on it for its authentication token
    /// (etcd checks a stream's token when each watch is created): refresh
    /// the token, then open it again.
    Refused,
    /// The store is gone.
    Closed,
}

/// The watch task's state across streams.
struct Task {
    client: Client,
    waiters: Arc<Waiters>,
    requests: mpsc::UnboundedReceiver<(String, i64)>,
    timeout: Duration,
    /// The keys to watch, each from the revision to resume it at: just
    /// after the last delete its watch delivered, or where it was asked for.
    wanted: HashMap<String, i64>,
    /// The watches on the current stream, by key. A watch this task
    /// cancels leaves this map first, so its cancellation is known for ours.
    ids: HashMap<String, i64>,
    /// The next watch ID: unique across streams, so an answer about an old
    /// watch can never be taken for a new one.
    next_id: i64,
}

async fn run(
    client: Client,
    waiters: Arc<Waiters>,
    requests: mpsc::UnboundedReceiver<(String, i64)>,
    timeout: Duration,
) {
    let mut task = Task {
        client,
        waiters,
        requests,
        timeout,
        wanted: HashMap::new(),
        ids: HashMap::new(),
        next_id: 1,
    };
    let mut backoff = Backoff::new(REOPEN_MIN, REOPEN_MAX, HEALTHY);
    // Authenticating is costly on the server (a password hash check): with
    // credentials that keep failing, a fleet of waiting processes must not
    // ask every second.
    let mut refusals = Backoff::new(REFUSED_MIN, REFUSED_MAX, HEALTHY);
    let mut tidy = tokio::time::interval(TIDY_EVERY);
    tidy.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // No stream while nothing is wanted: an idle store holds none.
        if task.wanted.is_empty() {
            let Some((key, revision)) = task.requests.recv().await else {
                return;
            };
            task.wanted.insert(key, revision);
        }
        if !task.take_requests() {
            return;
        }
        let up = Instant::now();
        let ended = match task.open().await {
            Some(mut stream) => task.serve(&mut stream, &mut tidy).await,
            None => Ended::Broken,
        };
        // Every end counts, an open that failed or a stream that came up
        // and broke at once alike: only a stream that stayed up a while
        // brings the pause back to its minimum.
        backoff.ended_after(up.elapsed());
        match ended {
            Ended::Closed => return,
            Ended::Refused => {
                tracing::debug!("etcd refused a watch for its token; authenticating again");
                let refreshed = Deadline::after(task.timeout, "EtcdConfig::timeout")
                    .bound(task.client.refresh_token())
                    .await;
                match refreshed {
                    Ok(_) => refusals = Backoff::new(REFUSED_MIN, REFUSED_MAX, HEALTHY),
                    Err(error) => {
                        tracing::debug!(%error, "etcd watch stream could not authenticate yet");
                        tokio::time::sleep(refusals.next_pause()).await;
                    }
                }
            }
            Ended::Broken => tracing::debug!("etcd watch stream lost; reopening"),
        }
        // The keys still waited for resume where their watch left off; no
        // waiter is woken, since no delete can have been missed.
        let waiters = Arc::clone(&task.waiters);
        task.wanted.retain(|key, _| waiters.contains(key));
        task.ids.clear();
        tokio::time::sleep(backoff.next_pause()).await;
    }
}

impl Task {
    /// Moves the watches asked for meanwhile into `wanted` (a key already
    /// wanted keeps its earlier revision); false once the store is gone.
    fn take_requests(&mut self) -> bool {
        loop {
            match self.requests.try_recv() {
                Ok((key, revision)) => {
                    self.wanted.entry(key).or_insert(revision);
                }
                Err(mpsc::error::TryRecvError::Empty) => return true,
                Err(mpsc::error::TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn take_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Opens the stream with every wanted key, within the store's timeout;
    /// `None` when it cannot.
    async fn open(&mut self) -> Option<WatchStream> {
        let deadline = Deadline::after(self.timeout, "EtcdConfig::timeout");
        let wanted: Vec<(String, i64)> = self
            .wanted
            .iter()
            .map(|(key, revision)| (key.clone(), *revision))
            .collect();
        let (first, rest) = wanted.split_first()?;
        let first_id = self.take_id();
        let mut client = self.client.watch_client();
        let opening = client.watch(first.0.as_bytes(), Some(options(&first.0, first_id, first.1)));
        let mut stream = match deadline.bound(opening).await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%error, "could not open the etcd watch stream yet");
                return None;
            }
        };
        self.ids.insert(first.0.clone(), first_id);
        for (key, revision) in rest {
            let id = self.take_id();
            let asked = stream.watch(key.as_bytes(), Some(options(key, id, *revision)));
            deadline.bound(asked).await.ok()?;
            self.ids.insert(key.clone(), id);
        }
        Some(stream)
    }

    /// Serves the stream until it ends: new keys to watch, deletes to wake
    /// waiters for, and watches nobody needs any more.
    async fn serve(&mut self, stream: &mut WatchStream, tidy: &mut tokio::time::Interval) -> Ended {
        loop {
            tokio::select! {
                request = self.requests.recv() => {
                    let Some((key, revision)) = request else { return Ended::Closed };
                    if !self.ids.contains_key(&key) {
                        self.wanted.insert(key.clone(), revision);
                        let id = self.take_id();
                        // Bounded: a stalled stream must not stop this task
                        // from hearing releases for good.
                        let sent = Deadline::after(self.timeout, "EtcdConfig::timeout")
                            .bound(stream.watch(key.as_bytes(), Some(options(&key, id, revision))))
                            .await;
                        if sent.is_err() {
                            return Ended::Broken;
                        }
                        self.ids.insert(key, id);
                    }
                }
                message = stream.message() => match message {
                    Ok(Some(response)) => {
                        if let Some(ended) = self.handle(&response) {
                            return ended;
                        }
                    }
                    Ok(None) | Err(_) => return Ended::Broken,
                },
                _ = tidy.tick() => {
                    let idle: Vec<String> = self
                        .ids
                        .keys()
                        .filter(|key| !self.waiters.contains(key))
                        .cloned()
                        .collect();
                    for key in idle {
                        self.wanted.remove(&key);
                        // Out of `ids` first: the answer to this cancel is
                        // then known for ours, and wakes nobody.
                        if let Some(id) = self.ids.remove(&key) {
                            let sent = Deadline::after(self.timeout, "EtcdConfig::timeout")
                                .bound(stream.cancel(id))
                                .await;
                            if sent.is_err() {
                                return Ended::Broken;
                            }
                        }
                    }
                }
            }
        }
    }

    /// Acts on one response: wakes a waiter of each deleted key, and deals
    /// with a watch the cluster ended. `Some` when the stream must be given
    /// up.
    fn handle(&mut self, response: &WatchResponse) -> Option<Ended> {
        if response.created() && self.wanted.values().any(|&from| from == FROM_NOW) {
            // A watch from now is up: what changed before it is not
            // replayed, so its key's observers read again.
            let id = response.watch_id();
            if let Some(key) = self.ids.iter().find_map(|(key, watch)| (*watch == id).then_some(key)) {
                if self.wanted.get(key) == Some(&FROM_NOW) {
                    self.waiters.wake_key(key);
                }
            }
        }
        for event in response.events() {
            let Some(kv) = event.kv() else { continue };
            let Ok(stored) = std::str::from_utf8(kv.key()) else {
                continue;
            };
            if event.event_type() != EventType::Delete {
                // A new writer (the key created, not put again by a
                // renewal): an election's new leader, for observers
                // (waiters wait for deletes).
                if let Stored::Writer(key) = keys::parse(stored) {
                    if kv.create_revision() == kv.mod_revision() {
                        self.waiters.changed(key);
                    }
                }
                continue;
            }
            let stored = keys::parse(stored);
            let key = stored.name();
            // A stream opened again resumes this key after this delete.
            if let Some(from) = self.wanted.get_mut(key) {
                *from = (*from).max(kv.mod_revision() + 1);
            }
            match stored {
                // The writer left: the name is free.
                Stored::Writer(_) => self.waiters.released(key),
                // A reader left: only a writer waits for readers, and only
                // the last one's leaving frees the name for it.
                Stored::Reader(_) if self.waiters.has_writers(key) => self.wake_if_no_readers(key),
                Stored::Reader(_) => {}
                // A waiting writer's claim ended: readers may go in.
                Stored::Claim(_) => self.waiters.readers_may_enter(key),
            }
        }
        if !response.canceled() {
            return None;
        }
        let id = response.watch_id();
        let known = self
            .ids
            .iter()
            .find_map(|(key, watch)| (*watch == id).then(|| key.clone()));
        let Some(key) = known else {
            if response.created() {
                // A watch refused at its creation: etcd answers those under
                // no watch ID (-1) when it refuses the stream's token.
                return Some(refused_or_broken(response.cancel_reason()));
            }
            // One this task cancelled (its key left `ids` then): no news.
            return None;
        };
        if response.compact_revision() > 0 {
            // Its start was compacted away: a delete may have gone unheard.
            // Its waiters retry once, and ask for a watch from a revision
            // the cluster still has.
            self.ids.remove(&key);
            self.wanted.remove(&key);
            self.waiters.wake_key(&key);
            return None;
        }
        Some(refused_or_broken(response.cancel_reason()))
    }
}

impl Task {
    /// Wakes a writer waiting for `key` once no reader of it is left, read
    /// in the background (this task must not wait on the cluster between
    /// messages). A read that fails wakes it too: it tries again, and
    /// waits again if readers are still there.
    fn wake_if_no_readers(&self, key: &str) {
        let (mut client, waiters) = (self.client.clone(), Arc::clone(&self.waiters));
        let (key, timeout) = (key.to_owned(), self.timeout);
        tokio::spawn(async move {
            let (readers, end) = keys::readers(&key);
            let options = GetOptions::new().with_range(end).with_count_only();
            let left = Deadline::after(timeout, "EtcdConfig::timeout")
                .bound(client.get(readers, Some(options)))
                .await;
            if !left.is_ok_and(|left| left.count() > 0) {
                waiters.released(&key);
            }
        });
    }
}

/// What to do about a watch the cluster ended, by its reason: etcd 3.4
/// says "invalid auth token" for a stale token and "permission denied" for
/// a missing one; refreshing the token is worth a try for both.
fn refused_or_broken(reason: &str) -> Ended {
    tracing::debug!(reason, "etcd ended a watch");
    if reason.contains("auth token") || reason.contains("permission denied") {
        Ended::Refused
    } else {
        Ended::Broken
    }
}

/// The watch of `key` and its companions (its readers, and the claims of
/// writers waiting for them).
fn options(key: &str, id: i64, revision: i64) -> WatchOptions {
    let options = WatchOptions::new()
        .with_range(keys::companions_end(key))
        .with_watch_id(id);
    if revision == FROM_NOW {
        options
    } else {
        options.with_start_revision(revision.max(1))
    }
}

/// The revision an observer's watch asks for: from whenever it is made
/// (an observer reads the leader again once it is, see `handle`).
pub(super) const FROM_NOW: i64 = 0;
