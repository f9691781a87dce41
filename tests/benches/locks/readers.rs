//! The read side of a name ([`Lock::read`](lock_core::Lock::read)) in
//! memory, against `tokio::sync::RwLock` read guards.

use std::sync::Arc;

use lock_core::LockManager;

use super::{Row, TTL, interleaved, op};

/// 64 tasks reading one name at once, each taking and releasing the read
/// side back to back, against the same tasks taking and dropping a
/// `tokio::sync::RwLock` read guard. No target: the ratio shows what a
/// named, expiring, listable reader costs over an in-process one.
pub(super) async fn memory_readers(rows: &mut Vec<Row>) {
    let locks = LockManager::memory();
    let ours = op(move |_| {
        let locks = locks.clone();
        async move {
            let guard = locks
                .lock("catalog", TTL)
                .read()
                .acquire()
                .await
                .expect("read")
                .expect("readers share the name");
            guard.release().await.expect("release");
        }
    });
    let rwlock = Arc::new(tokio::sync::RwLock::new(()));
    let tokio_readers = op(move |_| {
        let rwlock = Arc::clone(&rwlock);
        async move {
            let guard = rwlock.read().await;
            drop(guard);
        }
    });
    let samples = interleaved(64, &[("ours", ours), ("tokio", tokio_readers)]).await;
    rows.push(Row {
        section: "memory",
        what: "64 readers on one name".to_owned(),
        value: samples.median(0),
        unit: "pairs/s",
        baseline_name: "tokio RwLock read guards".to_owned(),
        baseline: samples.median(1),
        target: None,
        paired: samples.paired(0, 1),
    });
}
