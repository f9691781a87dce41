//! The store's one release subscription: hears every release announced on
//! the channel and wakes this process's waiters for that key (the sequence
//! is drawn in [`RedisStore`](super::RedisStore)'s docs).

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{PubSubSink, PubSubStream};
use ::redis::{Client, RedisError, Value};
use futures_util::StreamExt;

use crate::store::net::backoff::Backoff;
use crate::store::net::deadline::{CallError, Deadline};
use crate::store::net::waiters::Waiters;

/// How often the subscription checks that its server still answers.
const PING_EVERY: Duration = Duration::from_secs(5);

/// Bounds of the pause between attempts to re-establish the subscription.
const RESUBSCRIBE_MIN: Duration = Duration::from_millis(50);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(1);

/// A subscription that stayed up this long was healthy: after it ends, the
/// first attempt to resubscribe comes after the shortest pause again.
const SUBSCRIPTION_HEALTHY: Duration = Duration::from_secs(10);

/// The background task holding the store's one subscription.
pub(super) struct Listener {
    pub(super) subscribers: Vec<Client>,
    pub(super) channel: String,
    pub(super) timeout: Duration,
    pub(super) waiters: Arc<Waiters>,
}

pub(super) type Subscription = (PubSubSink, PubSubStream);

impl Listener {
    /// Subscribes through the first node that answers, starting at `start`.
    pub(super) async fn subscribe_any(
        &self,
        start: usize,
    ) -> Result<(usize, Subscription), CallError<RedisError>> {
        let mut last = CallError::TimedOut(self.timeout, "RedisConfig::timeout");
        for offset in 0..self.subscribers.len() {
            let index = (start + offset) % self.subscribers.len();
            match self.subscribe(&self.subscribers[index]).await {
                Ok(subscription) => return Ok((index, subscription)),
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    async fn subscribe(&self, client: &Client) -> Result<Subscription, CallError<RedisError>> {
        self.deadline()
            .bound(async {
                let mut pubsub = client.get_async_pubsub().await?;
                pubsub.subscribe(&self.channel).await?;
                Ok::<_, RedisError>(pubsub.split())
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
    pub(super) async fn run(self, mut index: usize, first: Subscription) {
        let mut subscription = Some(first);
        let mut backoff = Backoff::new(RESUBSCRIBE_MIN, RESUBSCRIBE_MAX, SUBSCRIPTION_HEALTHY);
        loop {
            if let Some((sink, stream)) = subscription.take() {
                let up = tokio::time::Instant::now();
                self.serve(sink, stream).await;
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

    /// Dispatches messages until the connection ends or stops answering.
    async fn serve(&self, mut sink: PubSubSink, mut stream: PubSubStream) {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                message = stream.next() => {
                    let Some(message) = message else { return };
                    if let Ok(key) = std::str::from_utf8(message.get_payload_bytes()) {
                        self.waiters.released(key);
                    }
                }
                _ = ping.tick() => {
                    if self.deadline().bound(sink.ping::<Value>()).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}
