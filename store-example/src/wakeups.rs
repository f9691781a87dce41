//! The subscription that wakes this process's waiters: one connection
//! that hears every release on the server, kept up for as long as the
//! store lives.
//!
//! A waiter registers with [`Waiters`] before its acquire is sent; each
//! `RELEASED <key>` heard here wakes one waiter of that key. While the
//! subscription is down, releases go unheard, so after every (re)connect,
//! once the server confirms the subscription, every waiter is woken to
//! try again: a release made before the confirmation may have been missed,
//! and any made after it is heard.

use std::sync::Arc;
use std::time::Duration;

use lock_core::store::kit::{Backoff, Deadline, Waiters};
use tokio::time::Instant;

use crate::connection::Connection;
use crate::protocol::{Reply, Request};

/// The first pause before reconnecting.
const MIN_PAUSE: Duration = Duration::from_millis(50);

/// The longest pause between attempts.
const MAX_PAUSE: Duration = Duration::from_secs(5);

/// How long a subscription must have stayed up for the pauses to start
/// from the minimum again.
const HEALTHY: Duration = Duration::from_secs(10);

/// Follows the server's releases, reconnecting with backoff, forever (the
/// store's [`Background`](lock_core::store::kit::Background) aborts it).
/// `timeout` bounds each connect-and-subscribe.
pub(crate) async fn listen(address: String, timeout: Duration, waiters: Arc<Waiters>) {
    let mut backoff = Backoff::new(MIN_PAUSE, MAX_PAUSE, HEALTHY);
    loop {
        let started = Instant::now();
        follow(&address, timeout, &waiters).await;
        // Also after a subscription that came up and dropped at once.
        backoff.ended_after(started.elapsed());
        tokio::time::sleep(backoff.next_pause()).await;
    }
}

/// One subscription, from connecting until it fails.
async fn follow(address: &str, timeout: Duration, waiters: &Waiters) {
    let subscribing = async {
        let mut connection = Connection::open(address).await?;
        let confirmed = connection.call(&Request::Subscribe).await?;
        Ok::<_, std::io::Error>((connection, confirmed))
    };
    let subscribed = Deadline::after(timeout, "MapConfig::timeout")
        .bound(subscribing)
        .await;
    let Ok((mut connection, confirmed)) = subscribed else {
        return;
    };
    if confirmed != [Reply::Subscribed] {
        return;
    }
    waiters.wake_all();
    while let Ok(reply) = connection.next().await {
        match reply {
            Reply::Released(key) => waiters.released(&key),
            // Nothing else belongs on a subscription: start over.
            _ => return,
        }
    }
}
