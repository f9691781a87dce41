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

/// Uncontended pairs on Redis, each task on a name of its own: taking and
/// releasing the read side against taking and releasing the lock (the
/// write side), interleaved in the same rounds. Target: readers at least
/// 0.9x the writers' pairs per second.
pub(super) async fn redis_readers(url: &str, tasks: usize, rows: &mut Vec<Row>) {
    let store = lock_core::RedisStore::connect(url).await.expect("connect");
    let locks = LockManager::new(store).with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let pair = |read: bool| {
        let locks = locks.clone();
        op(move |task| {
            let locks = locks.clone();
            async move {
                let lock = locks.lock(format!("pair:{task}"), TTL);
                let lock = if read { lock.read() } else { lock };
                let guard = lock.acquire().await.expect("acquire").expect("uncontended");
                guard.release().await.expect("release");
            }
        })
    };
    let samples = interleaved(tasks, &[("readers", pair(true)), ("writers", pair(false))]).await;
    rows.push(Row {
        section: "redis",
        what: format!("reader pairs, {tasks} task(s), own names"),
        value: samples.median(0),
        unit: "pairs/s",
        baseline_name: "writer pairs".to_owned(),
        baseline: samples.median(1),
        target: Some(super::Target::RatioAtLeast(0.9)),
        paired: samples.paired(0, 1),
    });
}
