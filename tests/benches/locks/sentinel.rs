//! Redis behind Sentinel with `replica_acks(1, ...)`: uncontended pairs
//! against the same writes sent by hand on one connection to the primary
//! (`SET NX PX` and `WAIT 1` in one pipeline, then a compare-and-delete
//! script), on a primary, a replica and three sentinels of the bench's own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use lock_core::{LockManager, RedisConfig, RedisStore};
use lock_tests::sentinel::Sentinels;

use crate::{Row, TTL, Target, interleaved, op, runtimes};

/// How long each write may wait for the replica's acknowledgement.
const ACK_TIMEOUT: Duration = Duration::from_secs(1);

/// Compare-and-delete, as any hand-written Redis lock releases.
const RELEASE: &str = r"if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

pub(crate) fn throughput(rows: &mut Vec<Row>) {
    let Some(group) = Sentinels::start() else {
        eprintln!("no redis-server: the replica-acks figures are missing from this run");
        return;
    };
    let primary = group.primary_port().expect("a primary");
    for (tasks, runtime) in runtimes() {
        runtime.block_on(throughput_on(&group.url(), primary, tasks, rows));
    }
}

async fn throughput_on(url: &str, primary: u16, tasks: usize, rows: &mut Vec<Row>) {
    let config = RedisConfig::new().replica_acks(1, ACK_TIMEOUT);
    let locks = LockManager::new(
        RedisStore::connect_with(url, config)
            .await
            .expect("connect through the sentinels"),
    )
    .with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let ours = {
        let locks = locks.clone();
        op(move |task| {
            let lock = locks.lock(format!("acked:{task}"), TTL);
            async move {
                let guard = lock.acquire().await.expect("acquire").expect("uncontended");
                guard.release().await.expect("release");
            }
        })
    };
    let connection = redis::Client::open(format!("redis://127.0.0.1:{primary}"))
        .expect("a client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the primary");
    let release = Arc::new(redis::Script::new(RELEASE));
    let counter = Arc::new(AtomicU64::new(0));
    let run = rand::random::<u32>();
    let by_hand = op(move |task| {
        let mut connection = connection.clone();
        let release = Arc::clone(&release);
        let token = format!("{task}:{}", counter.fetch_add(1, Ordering::Relaxed));
        async move {
            let key = format!("bench:acks-raw:{run}:{task}");
            let (set, acked): (Option<String>, i64) = redis::pipe()
                .cmd("SET")
                .arg(&key)
                .arg(&token)
                .arg("NX")
                .arg("PX")
                .arg(TTL.as_millis() as u64)
                .cmd("WAIT")
                .arg(1)
                .arg(ACK_TIMEOUT.as_millis() as u64)
                .query_async(&mut connection)
                .await
                .expect("SET and WAIT");
            assert!(set.is_some() && acked == 1, "uncontended and acknowledged");
            let _: i64 = release
                .key(&key)
                .arg(&token)
                .invoke_async(&mut connection)
                .await
                .expect("release");
        }
    });
    let samples = interleaved(tasks, &[("lock-core", ours), ("by hand", by_hand)]).await;
    rows.push(Row {
        section: "redis-replica-acks",
        what: format!("uncontended pairs with replica_acks(1), Sentinel, {tasks} task(s)"),
        value: samples.median(0),
        unit: "pairs/s",
        baseline_name: "SET NX PX + WAIT 1, then compare-and-delete, by hand".to_owned(),
        baseline: samples.median(1),
        target: Some(Target::RatioAtLeast(0.9)),
        paired: samples.paired(0, 1),
    });
}
