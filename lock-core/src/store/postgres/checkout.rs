//! A pooled connection lent to one call, which never goes back to the pool
//! busy.
//!
//! A statement the caller stops waiting for (its deadline passed, or its
//! future was dropped) keeps running on the server, and tokio-postgres keeps
//! the connection waiting for its answer. Handed back to the pool like that,
//! the connection would make every later call on it wait behind the
//! statement, for names that have nothing to do with it; and once the
//! statement got through (a migration's `LOCK TABLE` committed), an acquire
//! nobody waits for any more would write its lease after all.
//!
//! ```text
//! t=0     migration: LOCK TABLE lock_leases             (held until t=10)
//! t=0.1   acquire "a": INSERT ... waits for the table lock
//! t=3.1   acquire "a" times out; without this, its connection goes back
//!         to the pool with the INSERT still waiting on it
//! t=3.2   acquire "b" is handed that connection: waits behind "a", times out
//! t=10    COMMIT: "a"'s INSERT runs and writes a lease nobody holds
//! ```
//!
//! So a [`Checkout`] dropped before its statement answered never goes
//! back to the pool busy:
//!
//! - cut off at its deadline (the statement is slow or blocked), it asks the
//!   server to cancel the statement (the connection's cancel token, on a
//!   connection of its own) and detaches the connection from the pool,
//!   which closes it;
//! - dropped earlier (the caller's own `timeout`, a `select!` arm that
//!   lost), the statement may be about to answer: it keeps the connection
//!   out of the pool until an empty query sent after it answers (one
//!   connection answers in order), then returns it. If that takes past the
//!   call's deadline (at most [`DRAIN_MOST`]), it cancels and detaches as
//!   above.
//!
//! A cancel is only ever sent for a connection that is thrown away: it
//! arrives at the server later than it was sent, and on a connection back
//! in the pool it could cancel another call's statement.
//!
use std::ops::{Deref, DerefMut};
use std::time::Duration;

use deadpool_postgres::Object;
use tokio::time::Instant;
use super::tls::Connector;
use crate::store::kit::Deadline;

/// The longest a connection whose call was dropped early waits for its
/// statement to answer before it is cancelled and thrown away, when the
/// call's own deadline is later (or there is none).
pub(super) const DRAIN_MOST: Duration = Duration::from_secs(1);

/// A call's deadline, `timeout` from now, and the instant it ends (`None`:
/// no bound), for the [`Checkout`] that may outlive it.
pub(super) fn call_deadline(timeout: Duration) -> (Deadline, Option<Instant>) {
    let ends = Instant::now().checked_add(timeout);
    (Deadline::after(timeout, "PostgresConfig::timeout"), ends)
}

/// A pooled connection while a statement may be in flight on it: call
/// [`answered`](Checkout::answered) once the statement has answered (with
/// rows or an error); dropped before that, the connection is emptied or
/// thrown away (see the [module docs](self)).
pub(super) struct Checkout<'a> {
    client: Option<Object>,
    /// The call's deadline (`None`: no bound).
    ends: Option<Instant>,
    /// How long the cancel request may take.
    timeout: Duration,
    /// How the cancel request connects: as the store's connections do.
    connector: &'a Connector,
}

impl<'a> Checkout<'a> {
    /// `client` for a call that ends at `ends`, under the store's `timeout`;
    /// a cancel request goes through `connector`.
    pub(super) fn new(
        client: Object,
        ends: Option<Instant>,
        timeout: Duration,
        connector: &'a Connector,
    ) -> Self {
        Checkout {
            client: Some(client),
            ends,
            timeout,
            connector,
        }
    }

    /// The statement answered: the connection is idle and goes back to the
    /// pool.
    pub(super) fn answered(mut self) {
        drop(self.client.take());
    }
}

impl Deref for Checkout<'_> {
    type Target = Object;

    fn deref(&self) -> &Object {
        self.client.as_ref().expect("present until answered")
    }
}

impl DerefMut for Checkout<'_> {
    fn deref_mut(&mut self) -> &mut Object {
        self.client.as_mut().expect("present until answered")
    }
}

impl Drop for Checkout<'_> {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(
                "a PostgreSQL call was cut off outside a tokio runtime: its connection is closed, its statement not cancelled"
            );
            drop(Object::take(client));
            return;
        };
        let now = Instant::now();
        let drained = now + DRAIN_MOST;
        let until = self.ends.map_or(drained, |ends| ends.min(drained));
        let timeout = self.timeout;
        let connector = self.connector.clone();
        runtime.spawn(async move {
            if until > now {
                // Answered in order: once the empty query answers, the
                // statement before it has too, and the connection is idle.
                let emptied = tokio::time::timeout_at(until, client.batch_execute("")).await;
                if matches!(emptied, Ok(Ok(()))) {
                    return;
                }
            }
            cancel_and_close(client, timeout, connector).await;
        });
    }
}

/// Asks the server to cancel whatever `client` is running, and closes it
/// rather than return it to the pool.
async fn cancel_and_close(client: Object, timeout: Duration, connector: Connector) {
    let cancel = client.cancel_token();
    // Detached from the pool at once, so nobody else can take it; closed
    // only after the cancel was sent: dropping it closes the socket, and a
    // pooler (PgBouncer) ignores a cancel for a client that has gone.
    let detached = Object::take(client);
    // A cancel arriving after the statement finished is ignored by the
    // server. It connects as the store's own connections do (with
    // `from_pool`, as its LISTEN connection does), TLS included: a link
    // that asks for no TLS never sends it over TLS that checks nothing.
    let deadline = Deadline::after(timeout, "PostgresConfig::timeout");
    if let Err(error) = deadline.bound(connector.cancel(&cancel)).await {
        if connector.is_plain() && error.to_string().contains("TLS") {
            // Only `from_pool` cancels connections it did not open.
            tracing::warn!(
                %error,
                "could not cancel a PostgreSQL statement that was cut off on a TLS connection of \
                 the application's pool: the store's listen URL asks for no TLS, and a cancel \
                 request goes as it says; give the listen URL the sslmode and certificates the \
                 pool uses"
            );
        } else {
            tracing::debug!(%error, "could not cancel a PostgreSQL statement that was cut off");
        }
    }
    drop(detached);
}
