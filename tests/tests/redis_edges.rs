//! The promises at the edges, on Redis: futures cut off mid-request, a
//! holder whose connection stalls, a server that drops subscriptions, a slow
//! server and a runtime shutting down.
//!
//! Each test reproduces a way the promise once broke; time bounds are hang
//! guards unless the bound itself is the behaviour under test.

use lock_core::{LockManager, RedisStore};
use lock_tests::cancellation::{cut_lock_futures_at_random_points, still_held};
use lock_tests::harness;

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

/// Every Redis key under `prefix` that is a lease (not a waiters marker or a
/// fencing counter), read with SCAN in batches, never KEYS.
async fn lease_keys_under(url: &str, prefix: &str) -> Vec<String> {
    let mut connection = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let mut cursor: u64 = 0;
    let mut found = Vec::new();
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{{{prefix}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut connection)
            .await
            .expect("SCAN");
        found.extend(keys.into_iter().filter(|key| key.ends_with('}')));
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}

/// Asking Redis itself, not the lock API: after thousands of acquires, runs
/// and waiting acquires cut off at random points (some after their `SET NX
/// PX` reached the server, before its reply was read), no lease key is left
/// under the prefix once the give-backs land, far inside the 10-minute TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_futures_cut_off_mid_request_leave_no_lease_key_in_redis() {
    let Some(url) = harness::redis_url() else {
        return;
    };
    let store = RedisStore::connect(&url).await.expect("connect");
    let prefix = unique("cut");
    let locks = LockManager::new(store).with_prefix(prefix.clone());
    let (names, cuts) = cut_lock_futures_at_random_points(&locks, 1500, 3).await;
    assert!(cuts.cut > 100, "futures were cut off: {cuts:?}");
    let held = still_held(&locks, &names).await;
    assert!(
        held.is_empty(),
        "{} names still held by leases nobody owns ({cuts:?}): {held:?}",
        held.len()
    );
    let keys = lease_keys_under(&url, &prefix).await;
    assert!(keys.is_empty(), "lease keys left in Redis: {keys:?}");
}
