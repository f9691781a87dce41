//! The etcd figures: uncontended pairs against the same etcd requests sent
//! by hand on the same client (grant a lease, a put-if-absent transaction,
//! a delete-if-ours transaction, revoke), and handoff to a waiter on
//! another store, woken by its watch, on a single member.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp};
use lock_core::{EtcdStore, LockManager};

use crate::{Row, TTL, Target, handoff_across, interleaved, op, push_handoff, runtimes};

pub(crate) fn throughput(endpoints: &[String], rows: &mut Vec<Row>) {
    for (tasks, runtime) in runtimes() {
        runtime.block_on(throughput_on(endpoints, tasks, rows));
    }
}

async fn throughput_on(endpoints: &[String], tasks: usize, rows: &mut Vec<Row>) {
    let locks = LockManager::new(EtcdStore::connect(endpoints).await.expect("connect"))
        .with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let client = Client::connect(endpoints, None).await.expect("connect");
    let ours = {
        let locks = locks.clone();
        op(move |task| {
            let lock = locks.lock(format!("direct:{task}"), TTL);
            async move {
                let guard = lock.acquire().await.expect("acquire").expect("uncontended");
                guard.release().await.expect("release");
            }
        })
    };
    let counter = Arc::new(AtomicU64::new(0));
    let by_hand = op(move |task| {
        let mut client = client.clone();
        let token = format!("{task}:{}", counter.fetch_add(1, Ordering::Relaxed));
        async move {
            let key = format!("bench:raw:{task}");
            let lease = client.lease_grant(30, None).await.expect("grant").id();
            let take = Txn::new()
                .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.clone(),
                    token.clone(),
                    Some(PutOptions::new().with_lease(lease)),
                )]);
            assert!(
                client.txn(take).await.expect("take").succeeded(),
                "uncontended"
            );
            let give = Txn::new()
                .when([Compare::value(key.clone(), CompareOp::Equal, token)])
                .and_then([TxnOp::delete(key, None)]);
            client.txn(give).await.expect("give");
            client.lease_revoke(lease).await.expect("revoke");
        }
    });
    let samples = interleaved(tasks, &[("lock-core", ours), ("by hand", by_hand)]).await;
    rows.push(Row {
        section: "etcd",
        what: format!("uncontended pairs, lock-core API, {tasks} task(s)"),
        value: samples.median(0),
        unit: "pairs/s",
        baseline_name: "the same etcd requests by hand".to_owned(),
        baseline: samples.median(1),
        target: Some(Target::RatioAtLeast(0.95)),
        paired: samples.paired(0, 1),
    });
}

pub(crate) async fn handoff(endpoints: &[String], rows: &mut Vec<Row>) {
    let prefix = format!("bench:{}:", rand::random::<u32>());
    let holders = LockManager::new(EtcdStore::connect(endpoints).await.expect("connect"))
        .with_prefix(prefix.clone());
    // Another store: its waiters hear of releases through their watch, as
    // another process's would.
    let waiters =
        LockManager::new(EtcdStore::connect(endpoints).await.expect("connect")).with_prefix(prefix);
    let (ours, polling) = handoff_across(&holders, &waiters, 100, Duration::from_millis(20)).await;
    push_handoff(
        rows,
        "etcd",
        "a waiter on another store (watch), one member",
        &ours,
        "100 ms polling waiter",
        &polling,
        None,
    );
}
