//! The sweep: deletes the lease rows whose holders left them behind (they
//! died, or kept their claim) once they have expired, so the table holds
//! about one row per held name, whatever number of names are used.

use std::time::Duration;

use deadpool_postgres::Pool;

use super::checkout::{Checkout, call_deadline};
use super::tls::Connector;
use crate::store::kit::BoxError;

/// Deletes rows holders left behind, every `every`, for the store's life.
pub(super) async fn sweep(
    pool: Pool,
    connector: Connector,
    statement: String,
    every: Duration,
    timeout: Duration,
) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let (deadline, ends) = call_deadline(timeout);
        let swept = deadline
            .bound(async {
                let client = Checkout::new(
                    pool.get().await.map_err(|e| Box::new(e) as BoxError)?,
                    ends,
                    timeout,
                    &connector,
                );
                let swept = client.execute(statement.as_str(), &[]).await;
                client.answered();
                Ok::<_, BoxError>(swept?)
            })
            .await;
        match swept {
            Ok(0) => {}
            Ok(rows) => tracing::debug!(rows, "swept lease rows their holders left behind"),
            Err(error) => tracing::debug!(%error, "could not sweep the lease table this time"),
        }
    }
}
