//! The store's one watch stream: a watch per key that this process waits
//! for, multiplexed on one gRPC stream, waking the key's waiters when the
//! key is deleted (a release, a force-release, or its lease expiring).
//!
//! A waiter asks for its key to be watched from just after the revision at
//! which it found the key held, so a delete between its attempt and the
//! watch's creation is still delivered: etcd replays history from a start
//! revision. Watches of keys nobody waits for any more are cancelled. When
//! the stream breaks (a leader change, a member going away) it is opened
//! again after a growing pause, every watch is resumed from the last
//! revision seen, and every waiter retries once.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, EventType, WatchFilterType, WatchOptions, WatchResponse, WatchStream};
use tokio::sync::mpsc;

use crate::store::net::backoff::Backoff;
use crate::store::net::waiters::Waiters;

/// How often watches of keys nobody waits for are cancelled.
const TIDY_EVERY: Duration = Duration::from_secs(5);

/// Bounds of the pause between attempts to open the stream again.
const REOPEN_MIN: Duration = Duration::from_millis(50);
const REOPEN_MAX: Duration = Duration::from_secs(1);
const HEALTHY: Duration = Duration::from_secs(10);

/// Asks the watch task to watch a key.
#[derive(Clone)]
pub(super) struct Watches {
    requests: mpsc::UnboundedSender<(String, i64)>,
}

impl Watches {
    /// Starts the watch task for `client`'s cluster, waking `waiters`.
    pub(super) fn start(
        client: Client,
        waiters: Arc<Waiters>,
    ) -> (Watches, tokio::task::JoinHandle<()>) {
        let (requests, incoming) = mpsc::unbounded_channel();
        let task = tokio::spawn(run(client, waiters, incoming));
        (Watches { requests }, task)
    }

    /// Watches `key` from `revision` on (if it is not watched already).
    pub(super) fn watch(&self, key: &str, revision: i64) {
        let _ = self.requests.send((key.to_owned(), revision));
    }
}

async fn run(
    client: Client,
    waiters: Arc<Waiters>,
    mut requests: mpsc::UnboundedReceiver<(String, i64)>,
) {
    // The keys to watch, each from the revision to resume it at.
    let mut wanted: HashMap<String, i64> = HashMap::new();
    // The last revision the stream delivered.
    let mut seen: i64 = 0;
    let mut next_id: i64 = 1;
    let mut backoff = Backoff::new(REOPEN_MIN, REOPEN_MAX, HEALTHY);
    let mut tidy = tokio::time::interval(TIDY_EVERY);
    tidy.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        // No stream while nothing is wanted: an idle store holds none.
        if wanted.is_empty() {
            let Some((key, revision)) = requests.recv().await else {
                return;
            };
            wanted.insert(key, revision);
        }
        let mut ids: HashMap<String, i64> = HashMap::new();
        let up = tokio::time::Instant::now();
        if let Some(mut stream) = open(&client, &wanted, &mut ids, &mut next_id).await {
            serve(
                &mut stream,
                &waiters,
                &mut requests,
                &mut wanted,
                &mut ids,
                &mut next_id,
                &mut seen,
                &mut tidy,
            )
            .await;
        }
        // The stream broke (or never opened): waiters retry once, since a
        // delete may have gone unheard, and the keys still waited for are
        // watched again from after the last revision delivered.
        backoff.ended_after(up.elapsed());
        tracing::debug!("etcd watch stream lost; reopening");
        waiters.wake_all();
        wanted.retain(|key, _| waiters.contains(key));
        if seen > 0 {
            for from in wanted.values_mut() {
                *from = (*from).min(seen + 1);
            }
        }
        tokio::time::sleep(backoff.next_pause()).await;
    }
}

/// Opens the stream with every wanted key; `None` when it cannot.
async fn open(
    client: &Client,
    wanted: &HashMap<String, i64>,
    ids: &mut HashMap<String, i64>,
    next_id: &mut i64,
) -> Option<WatchStream> {
    let mut keys = wanted.iter();
    let (key, revision) = keys.next()?;
    let id = take(next_id);
    let mut stream = client
        .watch_client()
        .watch(key.as_bytes(), Some(options(id, *revision)))
        .await
        .ok()?;
    ids.insert(key.clone(), id);
    for (key, revision) in keys {
        let id = take(next_id);
        stream
            .watch(key.as_bytes(), Some(options(id, *revision)))
            .await
            .ok()?;
        ids.insert(key.clone(), id);
    }
    Some(stream)
}

/// Serves the stream until it breaks: new keys to watch, deletes to wake
/// waiters for, and watches nobody needs any more.
#[allow(clippy::too_many_arguments)]
async fn serve(
    stream: &mut WatchStream,
    waiters: &Waiters,
    requests: &mut mpsc::UnboundedReceiver<(String, i64)>,
    wanted: &mut HashMap<String, i64>,
    ids: &mut HashMap<String, i64>,
    next_id: &mut i64,
    seen: &mut i64,
    tidy: &mut tokio::time::Interval,
) {
    loop {
        tokio::select! {
            request = requests.recv() => {
                let Some((key, revision)) = request else { return };
                if !ids.contains_key(&key) {
                    let id = take(next_id);
                    if stream.watch(key.as_bytes(), Some(options(id, revision))).await.is_err() {
                        wanted.insert(key, revision);
                        return;
                    }
                    ids.insert(key.clone(), id);
                    wanted.insert(key, revision);
                }
            }
            message = stream.message() => match message {
                Ok(Some(response)) => handle(&response, waiters, wanted, ids, seen),
                Ok(None) | Err(_) => return,
            },
            _ = tidy.tick() => {
                let idle: Vec<String> = ids
                    .keys()
                    .filter(|key| !waiters.contains(key))
                    .cloned()
                    .collect();
                for key in idle {
                    wanted.remove(&key);
                    if let Some(id) = ids.remove(&key) {
                        let _ = stream.cancel(id).await;
                    }
                }
            }
        }
    }
}

fn take(next_id: &mut i64) -> i64 {
    let id = *next_id;
    *next_id += 1;
    id
}

fn options(id: i64, revision: i64) -> WatchOptions {
    WatchOptions::new()
        .with_watch_id(id)
        .with_start_revision(revision.max(1))
        .with_filters([WatchFilterType::NoPut])
}

/// Acts on one response: wakes the waiters of deleted keys, and forgets a
/// watch the server cancelled.
fn handle(
    response: &WatchResponse,
    waiters: &Waiters,
    wanted: &mut HashMap<String, i64>,
    ids: &mut HashMap<String, i64>,
    seen: &mut i64,
) {
    if let Some(header) = response.header() {
        *seen = (*seen).max(header.revision());
    }
    for event in response.events() {
        if event.event_type() == EventType::Delete {
            if let Some(kv) = event.kv() {
                if let Ok(key) = std::str::from_utf8(kv.key()) {
                    waiters.released(key);
                }
            }
        }
    }
    if response.canceled() {
        // Compacted past its start, or refused: forget the watch (a waiter
        // asks again on its next attempt) and let its waiters retry now.
        let id = response.watch_id();
        ids.retain(|key, watch| {
            let keep = *watch != id;
            if !keep {
                wanted.remove(key);
            }
            keep
        });
        waiters.wake_all();
    }
}
