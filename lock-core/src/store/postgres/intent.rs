//! A waiting writer's intent, taken back when the writer stops waiting
//! without the name.
//!
//! A writer held off by readers marks the row with its intent (see
//! [`read`](super::read)): no new reader gets in while it lasts. A writer
//! that gives up, or whose acquire fails or is dropped, takes it back at
//! once ([`withdraw`](super::read::withdraw)) rather than leave readers
//! out until it runs out, and then wakes the readers of this process it
//! stood in front of: this process's release woke the writer, not them,
//! and a reader that last tried while a writer held the name would
//! otherwise sleep until that writer's TTL.

use std::time::SystemTime;

use tokio_postgres::types::Type;

use super::names::{self, payload_of};
use super::PostgresStore;
use crate::store::Wakeup;
use crate::store::kit::Interest;

impl PostgresStore {
    /// The wakeup of a waiting writer's attempt on `key` that found it
    /// held: one that takes back `intent`, what the attempt left while
    /// readers held the name, if the writer stops waiting without it.
    /// Held by a writer (no `intent`), a plain one: that writer's release
    /// deletes the row, intent and all.
    pub(super) fn writer_wakeup(
        &self,
        interest: Interest,
        key: &str,
        intent: Option<SystemTime>,
    ) -> Wakeup {
        let Some(intent) = intent else {
            return interest.into_wakeup();
        };
        let (store, key) = (self.clone(), key.to_owned());
        interest.into_wakeup_withdrawing(async move { store.withdraw(&key, intent).await })
    }

    /// Takes back `intent` on `key`, if it is still the row's; a call that
    /// fails leaves it to run out.
    async fn withdraw(&self, key: &str, intent: SystemTime) {
        let stored = names::stored(key);
        let shared = &self.shared;
        let withdrawn = self
            .query(
                "take back the intent of a waiting writer on",
                key,
                &shared.statements.withdraw,
                &[
                    (&&*stored, Type::TEXT),
                    (&intent, Type::TIMESTAMPTZ),
                    (&shared.config.channel, Type::TEXT),
                    (&payload_of(key), Type::TEXT),
                ],
            )
            .await;
        if let Err(error) = withdrawn {
            tracing::debug!(%error, "a waiting writer's intent is left to run out");
        }
    }
}
