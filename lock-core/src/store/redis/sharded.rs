//! Release notifications on a cluster through sharded pub/sub (Redis 7):
//! each lock's channel lives in its lease's slot, so a release's `SPUBLISH`
//! stays on the shard that owns the key instead of being forwarded to every
//! node, and this process's `SSUBSCRIBE` goes to that shard too.
//!
//! The subscriptions ride on a cluster connection of their own (RESP3, with
//! pushes delivered to this listener), which routes each `SSUBSCRIBE` to the
//! owner of its slot and renews them after it reconnects. When a slot moves,
//! its owner drops the subscriptions of that slot's channels with an
//! `SUNSUBSCRIBE` push; the listener subscribes again, through the slot's
//! new owner, for every key somebody here still waits for, and wakes those
//! waiters once in case a release went unheard in between.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Client, ProtocolVersion, PushInfo, PushKind, RedisError, Value};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::wakeups::{announced, key_of_channel, release_channel};
use crate::store::kit::{CallError, Deadline};
use crate::store::kit::{Waiters, Watch};

/// How often subscriptions that failed are tried again.
const RETRY_EVERY: Duration = Duration::from_millis(250);

/// The background task holding the store's sharded subscriptions.
pub(super) struct ShardedListener {
    connection: ClusterConnection,
    pushes: UnboundedReceiver<PushInfo>,
    /// The suffix of every release channel ([`RedisConfig::channel`](super::RedisConfig::channel)).
    channel: String,
    timeout: Duration,
    waiters: Arc<Waiters>,
    changes: UnboundedReceiver<Watch>,
    /// Keys whose channels the connection is subscribed to.
    subscribed: HashSet<Box<str>>,
    /// Keys somebody waits for whose subscription failed: tried again every
    /// [`RETRY_EVERY`] while somebody still waits.
    unsubscribed: HashSet<Box<str>>,
}

impl ShardedListener {
    /// Connects the subscription connection through `nodes` (any nodes of
    /// the cluster). `Err` when the cluster cannot carry sharded pub/sub
    /// (no RESP3, or a server older than 7): the caller falls back to
    /// plain pub/sub.
    pub(super) async fn connect(
        nodes: &[Client],
        channel: String,
        timeout: Duration,
        waiters: Arc<Waiters>,
        changes: UnboundedReceiver<Watch>,
    ) -> Result<ShardedListener, (CallError<RedisError>, UnboundedReceiver<Watch>)> {
        let (sender, pushes) = unbounded_channel();
        let deadline = Deadline::after(timeout, "RedisConfig::timeout");
        let client =
            ClusterClient::builder(nodes.iter().map(|node| node.get_connection_info().clone()))
                .use_protocol(ProtocolVersion::RESP3)
                .push_sender(sender)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .build();
        let client = match client {
            Ok(client) => client,
            Err(error) => return Err((CallError::Store(error), changes)),
        };
        let probe = async {
            let mut connection = client.get_async_connection().await?;
            // SPUBLISH to a channel nobody listens to: answered on Redis 7,
            // refused as an unknown command before.
            ::redis::cmd("SPUBLISH")
                .arg("{lock-core}:probe")
                .arg("")
                .query_async::<Value>(&mut connection)
                .await?;
            Ok::<_, RedisError>(connection)
        };
        match deadline.bound(probe).await {
            Ok(connection) => Ok(ShardedListener {
                connection,
                pushes,
                channel,
                timeout,
                waiters,
                changes,
                subscribed: HashSet::new(),
                unsubscribed: HashSet::new(),
            }),
            Err(error) => Err((error, changes)),
        }
    }

    fn deadline(&self) -> Deadline {
        Deadline::after(self.timeout, "RedisConfig::timeout")
    }

    /// Serves pushes and subscription changes for the store's life.
    pub(super) async fn run(mut self) {
        let mut retry = tokio::time::interval(RETRY_EVERY);
        retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                Some(push) = self.pushes.recv() => self.on_push(push).await,
                // A change is history by the time it is read, and the queue
                // may hold many (waiters that came and went while a
                // subscription hung): each is checked against who waits now
                // and what is subscribed already, as the plain listener does
                // (`Listener::follow`).
                Some(change) = self.changes.recv() => match change {
                    Watch::Start(key) => {
                        if !self.subscribed.contains(&key) && self.waiters.contains(&key) {
                            self.subscribe(key).await;
                        }
                    }
                    Watch::Stop(key) => {
                        if !self.waiters.contains(&key) {
                            self.unsubscribe(&key).await;
                        }
                    }
                },
                _ = retry.tick(), if !self.unsubscribed.is_empty() => {
                    let keys: Vec<Box<str>> = self.unsubscribed.drain().collect();
                    for key in keys {
                        if self.waiters.contains(&key) {
                            self.subscribe(key).await;
                        }
                    }
                }
                else => return,
            }
        }
    }

    /// A release message wakes one local waiter; a subscription the server
    /// dropped (its slot moved) is renewed through the slot's new owner; a
    /// lost connection wakes every waiter once (its subscriptions are
    /// renewed by the connection itself, but releases in between went
    /// unheard).
    async fn on_push(&mut self, push: PushInfo) {
        match push.kind {
            PushKind::SMessage => {
                if let Some(payload) = push.data.get(1).and_then(text) {
                    announced(&self.waiters, payload);
                }
            }
            PushKind::SUnsubscribe => {
                let key = push
                    .data
                    .first()
                    .and_then(text)
                    .and_then(|channel| key_of_channel(channel, &self.channel));
                if let Some(key) = key
                    && self.subscribed.remove(key)
                    && self.waiters.contains(key)
                {
                    tracing::debug!(key, "release subscription dropped by the server; renewing");
                    let key: Box<str> = key.into();
                    self.subscribe(key).await;
                }
            }
            PushKind::Disconnection => self.waiters.wake_all(),
            _ => {}
        }
    }

    /// Subscribes to `key`'s channel, then wakes its waiters once: a
    /// release before the subscription was confirmed went unheard. When it
    /// fails, the waiters still wake on the holder's TTL, and the
    /// subscription is tried again shortly (and wakes them when it is
    /// made: a wake per failed try would have them poll the store while it
    /// cannot be reached).
    async fn subscribe(&mut self, key: Box<str>) {
        let channel = release_channel(&self.channel, &key);
        let mut connection = self.connection.clone();
        match self.deadline().bound(connection.ssubscribe(&channel)).await {
            Ok(()) => {
                self.unsubscribed.remove(&key);
                self.waiters.wake_key(&key);
                self.subscribed.insert(key);
            }
            Err(error) => {
                tracing::debug!(%error, key = &*key, "could not subscribe to releases yet");
                self.unsubscribed.insert(key);
            }
        }
    }

    async fn unsubscribe(&mut self, key: &str) {
        self.unsubscribed.remove(key);
        if !self.subscribed.remove(key) {
            return;
        }
        let channel = release_channel(&self.channel, key);
        let mut connection = self.connection.clone();
        if let Err(error) = self
            .deadline()
            .bound(connection.sunsubscribe(&channel))
            .await
        {
            // Left subscribed: the releases it hears wake nobody.
            tracing::debug!(%error, key, "could not unsubscribe from releases");
        }
    }
}

/// A bulk string or simple string as text.
fn text(value: &Value) -> Option<&str> {
    match value {
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
        Value::SimpleString(text) => Some(text),
        _ => None,
    }
}
