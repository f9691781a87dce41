//! A manager over a store on a server of its own, for the suites.

use lock_core::LockManager;
use lock_store_example::{MapServer, MapStore};

/// A manager over a [`MapStore`] on a new [`MapServer`], which lives until
/// the test's runtime ends.
pub(crate) async fn manager() -> Option<LockManager> {
    let server = MapServer::start().await.expect("start a map server");
    let store = MapStore::connect(&server.url())
        .await
        .expect("connect to the map server");
    // The suite is handed only the manager: a task holds the server, and
    // the runtime drops it (stopping the server) when the test ends.
    tokio::spawn(async move {
        let _server = server;
        std::future::pending::<()>().await;
    });
    Some(LockManager::new(store))
}
