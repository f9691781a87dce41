//! The store's one `LISTEN` connection: hears every release `NOTIFY` on the
//! channel and wakes this process's waiters for that name.
//!
//! It needs a connection of its own that keeps its session (a `LISTEN` lives
//! in the session): straight to PostgreSQL, or through a PgBouncer pool in
//! session mode, never transaction mode. When it breaks (the server
//! restarts, an administrator terminates it), it is opened again after a
//! growing pause, listens again, and wakes every waiter once, in case a
//! release went unheard meanwhile; waiters also wake at the holder's expiry
//! or their deadline whatever happens to it.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::Duration;

use tokio_postgres::AsyncMessage;

use super::sql::quoted;
use super::link::Link;
use super::tls::Stream;
use crate::store::kit::{Backoff, Deadline, Waiters};

/// How often the connection checks that the server still answers.
const PING_EVERY: Duration = Duration::from_secs(5);

/// Bounds of the pause between attempts to listen again.
const RELISTEN_MIN: Duration = Duration::from_millis(50);
const RELISTEN_MAX: Duration = Duration::from_secs(1);

/// A connection that stayed up this long was healthy: the next attempt
/// after it ends comes after the shortest pause again.
const HEALTHY: Duration = Duration::from_secs(10);

/// The background task holding the store's `LISTEN` connection.
pub(super) struct Listener {
    /// Where and how to connect, TLS included.
    pub(super) link: Link,
    pub(super) channel: String,
    pub(super) timeout: Duration,
    pub(super) waiters: Arc<Waiters>,
}

/// A connected, listening session: the client (for the ping) and its
/// connection (the source of notifications).
type Session = (tokio_postgres::Client, SessionConnection);

impl Listener {
    fn deadline(&self) -> Deadline {
        Deadline::after(self.timeout, "PostgresConfig::timeout")
    }

    /// Connects and sends `LISTEN`, within the timeout.
    pub(super) async fn listen(&self) -> Result<Session, String> {
        let (client, mut connection) = self
            .deadline()
            .bound(self.link.config.connect(self.link.connector.clone()))
            .await
            .map_err(|e| e.to_string())?;
        // Quoted, quotes doubled: `pg_notify` takes the channel as text,
        // so it may hold anything.
        let statement = format!("LISTEN {}", quoted(&self.channel));
        // The connection must be polled for the LISTEN to complete; drive
        // both until the statement's answer arrives.
        let listening = self.deadline().bound(async {
            let mut query = std::pin::pin!(client.batch_execute(&statement));
            loop {
                tokio::select! {
                    done = &mut query => return done,
                    message = poll_fn(|cx| connection.poll_message(cx)) => match message {
                        Some(Ok(AsyncMessage::Notification(note))) => self.heard(note.payload()),
                        Some(Ok(_)) => {}
                        Some(Err(e)) => return Err(e),
                        None => return query.await,
                    },
                }
            }
        });
        listening.await.map_err(|e| e.to_string())?;
        Ok((client, connection))
    }

    /// Serves the session until it fails, then listens again, with a
    /// growing pause between attempts, for the store's life.
    pub(super) async fn run(self, first: Session) {
        let mut session = Some(first);
        let mut backoff = Backoff::new(RELISTEN_MIN, RELISTEN_MAX, HEALTHY);
        loop {
            if let Some((client, connection)) = session.take() {
                let up = tokio::time::Instant::now();
                self.serve(client, connection).await;
                backoff.ended_after(up.elapsed());
                tracing::debug!(channel = %self.channel, "release LISTEN connection lost; listening again");
            }
            tokio::time::sleep(backoff.next_pause()).await;
            match self.listen().await {
                Ok(fresh) => {
                    // Releases while we were away went unheard: let every
                    // waiter retry once.
                    self.waiters.wake_all();
                    session = Some(fresh);
                }
                Err(error) => tracing::debug!(%error, "could not listen for releases yet"),
            }
        }
    }

    /// Dispatches notifications until the connection ends or stops
    /// answering.
    async fn serve(&self, client: tokio_postgres::Client, mut connection: SessionConnection) {
        let mut ping = tokio::time::interval(PING_EVERY);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ping.tick().await;
        loop {
            tokio::select! {
                message = poll_fn(|cx| connection.poll_message(cx)) => match message {
                    Some(Ok(AsyncMessage::Notification(note))) => self.heard(note.payload()),
                    Some(Ok(_)) => {}
                    Some(Err(_)) | None => return,
                },
                _ = ping.tick() => {
                    // The ping's answer arrives through the connection, so
                    // keep polling it while waiting.
                    let alive = self.deadline().bound(async {
                        let mut query = std::pin::pin!(client.simple_query(""));
                        loop {
                            tokio::select! {
                                done = &mut query => return done.map(drop),
                                message = poll_fn(|cx| connection.poll_message(cx)) => match message {
                                    Some(Ok(AsyncMessage::Notification(note))) => self.heard(note.payload()),
                                    Some(Ok(_)) => {}
                                    Some(Err(e)) => return Err(e),
                                    None => return query.await.map(drop),
                                },
                            }
                        }
                    });
                    if alive.await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// A release was announced: an empty payload (a name too long to send)
    /// wakes everyone, a name wakes its waiters. `+` before it announces a
    /// fenced name's new holder, for its observers only.
    fn heard(&self, payload: &str) {
        match payload.strip_prefix('+') {
            Some("") => self.waiters.wake_all(),
            Some(name) => self.waiters.changed(name),
            None if payload.is_empty() => self.waiters.wake_all(),
            None => self.waiters.released(payload),
        }
    }
}

type SessionConnection = tokio_postgres::Connection<tokio_postgres::Socket, Stream>;

/// The longest channel name PostgreSQL keeps whole: `LISTEN` cuts a longer
/// one to this (`NAMEDATALEN - 1`) and `pg_notify` refuses it.
pub(super) const MAX_CHANNEL: usize = 63;

/// `Ok` for a channel that `LISTEN` and `pg_notify` both take as it is, or
/// why not and what to do.
///
/// A longer channel would be cut by `LISTEN` but refused by `pg_notify`,
/// whose error rolls back the release's `DELETE`: every release someone
/// waits for would fail. So it is refused when the store is set up.
pub(super) fn check_channel(channel: &str) -> Result<(), String> {
    if channel.is_empty() || channel.len() > MAX_CHANNEL || channel.contains('\0') {
        return Err(format!(
            "the notification channel {channel:?} ({} bytes) is not one PostgreSQL can both LISTEN on and notify: \
             a channel is 1 to {MAX_CHANNEL} bytes without NUL (a longer one is cut by LISTEN and refused by \
             pg_notify, failing releases); set PostgresConfig::channel to a shorter name, the same in every \
             process that shares the table",
            channel.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    // A channel PostgreSQL would cut or refuse fails every release that
    // someone waits for: it must be refused up front, saying the limit.
    #[test]
    fn channels_of_1_to_63_bytes_without_nul_are_accepted() {
        for good in ["c", "lock_core_released", &"é".repeat(31), &"c".repeat(63)] {
            assert!(check_channel(good).is_ok(), "{good:?}");
        }
        for bad in [
            String::new(),
            "c".repeat(64),
            "é".repeat(32),
            "a\0b".to_owned(),
        ] {
            let refused = check_channel(&bad).expect_err("refused");
            assert!(refused.contains("63 bytes"), "says the limit: {refused}");
        }
    }
}
