//! The PostgreSQL figures: uncontended pairs against the same kind of SQL
//! sent by hand on the same client and pool, handoff to a waiter on another
//! store (another process's view: woken by the release's NOTIFY), and the
//! table after 100,000 distinct names.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use lock_core::{LockManager, PostgresConfig, PostgresStore};
use tokio_postgres::NoTls;
use tokio_postgres::types::Type;

use crate::{Row, TTL, Target, handoff_across, interleaved, op, push_handoff, runtimes};

/// The bench's own schema, dropped at the end.
fn schema() -> String {
    format!("lock_bench_{}", std::process::id())
}

fn config() -> PostgresConfig {
    PostgresConfig::new().schema(schema())
}

/// A correct lease written by hand: take the row if absent or expired, on
/// the database's clock; delete it only with our token.
const TAKE: &str = "INSERT INTO {t} AS t (name, token, holder, acquired_at, expires_at)
VALUES ($1, $2, 'bench', clock_timestamp(), clock_timestamp() + interval '30 seconds')
ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token, acquired_at = EXCLUDED.acquired_at,
    expires_at = EXCLUDED.expires_at
WHERE t.expires_at <= clock_timestamp()
RETURNING 1";
const GIVE: &str = "DELETE FROM {t} WHERE name = $1 AND token = $2";

fn pool(url: &str, size: usize) -> Pool {
    let config: tokio_postgres::Config = url.parse().expect("url");
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(size)
        .runtime(Runtime::Tokio1)
        .build()
        .expect("pool")
}

pub(crate) fn throughput(url: &str, rows: &mut Vec<Row>) {
    for (tasks, runtime) in runtimes() {
        runtime.block_on(throughput_on(url, tasks, rows));
    }
}

async fn throughput_on(url: &str, tasks: usize, rows: &mut Vec<Row>) {
    let store = PostgresStore::connect_with(url, config())
        .await
        .expect("connect");
    let locks = LockManager::new(store).with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let table = format!("\"{}\".lock_leases", schema());
    let take = Arc::new(TAKE.replace("{t}", &table));
    let give = Arc::new(GIVE.replace("{t}", &table));
    // The same pool size as the store's default.
    let raw = pool(url, 4);
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
        let raw = raw.clone();
        let (take, give) = (Arc::clone(&take), Arc::clone(&give));
        let token = format!("{task}:{}", counter.fetch_add(1, Ordering::Relaxed));
        async move {
            let name = format!("raw:{task}");
            // Prepared once per pooled connection, as the store does.
            let types = [Type::TEXT, Type::TEXT];
            let client = raw.get().await.expect("pooled");
            let statement = client
                .prepare_typed_cached(&take, &types)
                .await
                .expect("prepare");
            let taken = client
                .query(&statement, &[&name, &token])
                .await
                .expect("take");
            assert_eq!(taken.len(), 1, "uncontended");
            drop(client);
            let client = raw.get().await.expect("pooled");
            let statement = client
                .prepare_typed_cached(&give, &types)
                .await
                .expect("prepare");
            client
                .query(&statement, &[&name, &token])
                .await
                .expect("give");
        }
    });
    let samples = interleaved(tasks, &[("lock-core", ours), ("by hand", by_hand)]).await;
    rows.push(Row {
        section: "postgres",
        what: format!("uncontended pairs, lock-core API, {tasks} task(s)"),
        value: samples.median(0),
        unit: "pairs/s",
        baseline_name: "the same kind of SQL by hand".to_owned(),
        baseline: samples.median(1),
        target: Some(Target::RatioAtLeast(0.95)),
        paired: samples.paired(0, 1),
    });
}

pub(crate) async fn handoff_and_table(url: &str, rows: &mut Vec<Row>) {
    let prefix = format!("bench:{}:", rand::random::<u32>());
    let holders = LockManager::new(
        PostgresStore::connect_with(url, config())
            .await
            .expect("connect"),
    )
    .with_prefix(prefix.clone());
    // Another store: its waiters hear of releases only through NOTIFY, as
    // another process's would.
    let waiters = LockManager::new(
        PostgresStore::connect_with(url, config())
            .await
            .expect("connect"),
    )
    .with_prefix(prefix);
    let (ours, polling) = handoff_across(&holders, &waiters, 200, Duration::from_millis(5)).await;
    push_handoff(
        rows,
        "postgres",
        "a waiter on another store (NOTIFY)",
        &ours,
        "100 ms polling waiter",
        &polling,
        Some(2000.0),
    );
    table_after_distinct_names(url, &holders, rows).await;
}

/// Acquires and releases 100,000 distinct names (64 at a time), then
/// reports the table's rows and size.
async fn table_after_distinct_names(url: &str, locks: &LockManager, rows: &mut Vec<Row>) {
    const NAMES: u64 = 100_000;
    let next = Arc::new(AtomicU64::new(0));
    let workers: Vec<_> = (0..64)
        .map(|_| {
            let locks = locks.clone();
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= NAMES {
                        return;
                    }
                    let guard = locks
                        .lock(format!("tenant:{i}"), TTL)
                        .acquire()
                        .await
                        .expect("acquire")
                        .expect("a fresh name is free");
                    guard.release().await.expect("release");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker");
    }
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.expect("connect");
    tokio::spawn(connection);
    let table = format!("\"{}\".lock_leases", schema());
    let row = client
        .query_one(
            &format!("SELECT count(*), pg_total_relation_size('{table}') FROM {table}"),
            &[],
        )
        .await
        .expect("measure");
    let (count, bytes): (i64, i64) = (row.get(0), row.get(1));
    rows.push(Row {
        section: "postgres",
        what: format!("lease table rows after {NAMES} distinct names acquired and released"),
        value: count as f64,
        unit: "rows",
        baseline_name: "-".to_owned(),
        baseline: 0.0,
        target: Some(Target::AtMost(0.0)),
        paired: None,
    });
    rows.push(Row {
        section: "postgres",
        what: "lease table and index bytes then (before vacuum)".to_owned(),
        value: bytes as f64,
        unit: "B",
        baseline_name: "-".to_owned(),
        baseline: 0.0,
        target: None,
        paired: None,
    });
    let _ = client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", schema()))
        .await;
}
