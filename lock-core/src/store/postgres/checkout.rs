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
//! So a [`Checkout`] dropped before the statement answered asks the server
//! to cancel it (the connection's cancel token, on a connection of its own)
//! and detaches the connection from the pool, which closes it.
//!
//! The server-side `statement_timeout` and `lock_timeout` would bound such a
//! statement too, but they are session settings: sent as a startup option,
//! PgBouncer refuses the connection, and set with `SET` they would leak into
//! other clients' transactions behind PgBouncer in transaction mode. The
//! store depends on no session state, so it cancels instead.

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use deadpool_postgres::Object;
use tokio_postgres::NoTls;

use crate::store::net::deadline::Deadline;

/// A pooled connection while a statement may be in flight on it: call
/// [`answered`](Checkout::answered) once the statement has answered (with
/// rows or an error); dropped before that, the statement is cancelled and
/// the connection thrown away (see the [module docs](self)).
pub(super) struct Checkout {
    client: Option<Object>,
    /// How long the cancel request may take.
    timeout: Duration,
}

impl Checkout {
    pub(super) fn new(client: Object, timeout: Duration) -> Self {
        Checkout {
            client: Some(client),
            timeout,
        }
    }

    /// The statement answered: the connection is idle and goes back to the
    /// pool.
    pub(super) fn answered(mut self) {
        drop(self.client.take());
    }
}

impl Deref for Checkout {
    type Target = Object;

    fn deref(&self) -> &Object {
        self.client.as_ref().expect("present until answered")
    }
}

impl DerefMut for Checkout {
    fn deref_mut(&mut self) -> &mut Object {
        self.client.as_mut().expect("present until answered")
    }
}

impl Drop for Checkout {
    fn drop(&mut self) {
        let Some(client) = self.client.take() else {
            return;
        };
        let cancel = client.cancel_token();
        // Detached from the pool: dropping it closes the connection (once
        // the server answers the cancelled statement) instead of lending it
        // to the next call.
        drop(Object::take(client));
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::debug!(
                "a PostgreSQL call was cut off outside a tokio runtime: its connection is closed, its statement not cancelled"
            );
            return;
        };
        let deadline = Deadline::after(self.timeout, "PostgresConfig::timeout");
        runtime.spawn(async move {
            // A cancel arriving after the statement finished is ignored by
            // the server. Over TLS, the application's connector is not ours
            // to use; a server that insists on TLS refuses this, and the
            // statement runs to its end on a connection nobody will use.
            if let Err(error) = deadline.bound(cancel.cancel_query(NoTls)).await {
                tracing::debug!(%error, "could not cancel a PostgreSQL statement that was cut off");
            }
        });
    }
}
