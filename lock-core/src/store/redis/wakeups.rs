//! The store's one pub/sub connection: subscribed to the release channel of
//! each lock this process waits for, and only those, it wakes this process's
//! waiters for that key (the sequence is drawn in
//! [`RedisStore`](super::RedisStore)'s docs).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{PubSubSink, PubSubStream};
use ::redis::{Client, RedisError, Value};
use futures_util::StreamExt;

use super::sentinel::SentinelConnection;
use crate::store::kit::Backoff;
use crate::store::kit::{CallError, Deadline};
use crate::store::kit::{Waiters, Watch};
use tokio::sync::mpsc::UnboundedReceiver;

/// How often the subscription checks that its server still answers.
const PING_EVERY: Duration = Duration::from_secs(5);

/// Bounds of the pause between attempts to re-establish the subscription.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(1);

/// A subscription that stayed up this long was healthy: after it ends, the
/// first attempt to resubscribe comes after the shortest pause again.
const SUBSCRIPTION_HEALTHY: Duration = Duration::from_secs(10);

/// The channel the releases of the lease `lease` are published on, when
/// somebody waits for it: `<lease key>:<suffix>`, for example
/// `{lock:reports:acme}:lock-core:released`. Starting with the lease key
/// makes the key's hash tag the channel's, so on a cluster the channel is in
/// the lease's slot (what sharded pub/sub needs) whatever the suffix holds.
/// The release script builds the same name.
pub(super) fn release_channel(suffix: &str, lease: &str) -> String {
    let mut channel = String::with_capacity(lease.len() + 1 + suffix.len());
    channel.push_str(lease);
    channel.push(':');
    channel.push_str(suffix);
    channel
}

/// The lease key a release channel is for: the inverse of
/// [`release_channel`].
pub(super) fn key_of_channel<'a>(channel: &'a str, suffix: &str) -> Option<&'a str> {
    channel.strip_suffix(suffix)?.strip_suffix(':')
}

/// Acts on a message of a release channel: a lease key (a release), or `+`
/// and a lease key (a fenced lease's new holder, for observers only).
pub(super) fn announced(waiters: &Waiters, payload: &str) {
    match payload.strip_prefix('+') {
        Some(key) => waiters.changed(key),
        None => waiters.released(payload),
    }
}

/// Where the release subscription can be opened.
pub(super) enum Nodes {
    /// These nodes, tried in turn (one server, or a cluster's nodes: a
    /// release published on any node of a cluster reaches every node).
    Fixed(Vec<Client>),
    /// The primary the sentinels name when the subscription opens, asked
    /// afresh each time, so that after a failover it moves to the new
    /// primary.
    Sentinel(SentinelConnection),
}

/// The background task holding the store's one pub/sub connection.
pub(super) struct Listener {
    pub(super) subscribers: Nodes,
    /// The suffix of every release channel ([`RedisConfig::channel`](super::RedisConfig::channel)).
    pub(super) channel: String,
    pub(super) timeout: Duration,
    pub(super) waiters: Arc<Waiters>,
    /// Which keys gained their first local waiter or lost their last.
    pub(super) changes: UnboundedReceiver<Watch>,
}

/// A live subscription: its connection's two halves, and the keys whose
/// release channels it is subscribed to.
pub(super) struct Subscription {
    sink: PubSubSink,
    stream: PubSubStream,
    keys: HashSet<Box<str>>,
}

impl Listener {
    /// Subscribes through the first node that answers, starting at `start`
    /// (through the primary the sentinels name now, behind Sentinel).
    pub(super) async fn subscribe_any(
        &self,
        start: usize,
    ) -> Result<(usize, Subscription), CallError<RedisError>> {
        let clients = match &self.subscribers {
            Nodes::Fixed(clients) => clients,
            Nodes::Sentinel(sentinel) => {
                let client = self.deadline().bound(sentinel.primary_client()).await?;
                return Ok((0, self.subscribe(&client).await?));
            }
        };
        let mut last = CallError::TimedOut(self.timeout, "RedisConfig::timeout");
        for offset in 0..clients.len() {
            let index = (start + offset) % clients.len();
            match self.subscribe(&clients[index]).await {
                Ok(subscription) => return Ok((index, subscription)),
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    /// Opens a pub/sub connection to `client`'s node, subscribed to the
    /// release channel of every key somebody waits for now.
    async fn subscribe(&self, client: &Client) -> Result<Subscription, CallError<RedisError>> {
        let keys: HashSet<Box<str>> = self.waiters.keys().into_iter().collect();
        let channels: Vec<String> = keys
            .iter()
            .map(|key| release_channel(&self.channel, key))
            .collect();
        self.deadline()
            .bound(async {
                let mut pubsub = client.get_async_pubsub().await?;
                if !channels.is_empty() {
                    pubsub.subscribe(&channels).await?;
                }
                let (sink, stream) = pubsub.split();
                Ok::<_, RedisError>(Subscription { sink, stream, keys })
            })
            .await
    }

    fn deadline(&self) -> Deadline {
        Deadline::after(self.timeout, "RedisConfig::timeout")
    }

    /// Serves the subscription until it fails, then re-subscribes (through the
    /// next node, on a cluster), for the store's life.
    ///
    /// Every attempt waits its turn in a growing [`Backoff`], whether the
    /// last one failed or "succeeded" and was dropped at once: a server that
    /// accepts subscriptions and closes them gets one attempt per pause, not
    /// hundreds a second, and the waiters (woken after each resubscription,
    /// in case a release went unheard) are woken at most once per pause.
    pub(super) async fn run(mut self, mut index: usize, first: Subscription) {
        let mut subscription = Some(first);
        let mut backoff = Backoff::new(RESUBSCRIBE_MIN, RESUBSCRIBE_MAX, SUBSCRIPTION_HEALTHY);
        loop {
            if let Some(live) = subscription.take() {
                let up = tokio::time::Instant::now();
                self.serve(live).await;
                backoff.ended_after(up.elapsed());
                tracing::debug!(channel = %self.channel, "release subscription lost; resubscribing");
                index += 1;
            }
            tokio::time::sleep(backoff.next_pause()).await;
            match self.subscribe_any(index).await {
                Ok((at, fresh)) => {
                    index = at;
                    // Releases while we were away went unheard: let every
                    // waiter retry once.
                    self.waiters.wake_all();
                    subscription = Some(fresh);
                }
                Err(error) => {
                    tracing::debug!(%error, "could not resubscribe to releases yet");
                }
            }
        }
    }

    /// Dispatches messages, and subscribes and unsubscribes as keys gain
    /// their first local waiter and lose their last, until the connection
    /// ends or stops answering.
    async fn serve(&mut self, mut live: Subscription) {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                message = live.stream.next() => {
                    let Some(message) = message else { return };
                    if let Ok(payload) = std::str::from_utf8(message.get_payload_bytes()) {
                        announced(&self.waiters, payload);
                    }
                }
                Some(change) = self.changes.recv() => {
                    if self.follow(&mut live, change).await.is_err() {
                        return;
                    }
                }
                _ = ping.tick() => {
                    if self.deadline().bound(live.sink.ping::<Value>()).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Subscribes to a key's release channel when its first local waiter
    /// arrives, then wakes its waiters once: they registered (and may have
    /// gone to sleep) before the subscription was confirmed, and a release
    /// in between went unheard. Unsubscribes when the last one leaves.
    ///
    /// A change is history by the time it is read, and the queue may hold
    /// many (waiters that came and went while the subscription was down,
    /// made again since for the keys waited for then): each is checked
    /// against who waits now and what the subscription already has. A key
    /// subscribed to all along needs no wake (no release went unheard), one
    /// nobody waits for any more needs no subscription, and one that gained
    /// a waiter again keeps its subscription.
    async fn follow(
        &self,
        live: &mut Subscription,
        change: Watch,
    ) -> Result<(), CallError<RedisError>> {
        match change {
            Watch::Start(key) => {
                if live.keys.contains(&key) || !self.waiters.contains(&key) {
                    return Ok(());
                }
                let channel = release_channel(&self.channel, &key);
                self.deadline().bound(live.sink.subscribe(&channel)).await?;
                self.waiters.wake_key(&key);
                live.keys.insert(key);
            }
            Watch::Stop(key) => {
                if self.waiters.contains(&key) || !live.keys.remove(&key) {
                    return Ok(());
                }
                let channel = release_channel(&self.channel, &key);
                self.deadline().bound(live.sink.unsubscribe(&channel)).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_channel_starts_with_its_lease_key_and_gives_it_back() {
        // Starting with the lease key puts the channel in the lease's slot
        // (its hash tag), which sharded pub/sub needs.
        let channel = release_channel("lock-core:released", "{lock:reports:acme}");
        assert_eq!(channel, "{lock:reports:acme}:lock-core:released");
        assert_eq!(
            key_of_channel(&channel, "lock-core:released"),
            Some("{lock:reports:acme}")
        );
        assert_eq!(key_of_channel(&channel, "other"), None);
    }
}
