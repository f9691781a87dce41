//! The memcached figures: uncontended pairs against the same meta commands
//! sent by hand, and handoff to a waiter in this process (woken by the
//! release) against one in another process (which naps for the TTL).

use std::sync::Arc;
use std::time::{Duration, Instant};

use lock_core::{LockManager, MemcachedStore};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

use crate::{Row, TTL, Target, handoff, interleaved, op, push_handoff, runtimes};

pub(crate) fn throughput(url: &str, rows: &mut Vec<Row>) {
    for (tasks, runtime) in runtimes() {
        runtime.block_on(throughput_on(url, tasks, rows));
    }
}

/// One connection per task for the hand-written loop: nothing shared, no
/// coordination, the commands back to back.
type Raw = Arc<Vec<Mutex<Option<BufReader<TcpStream>>>>>;

async fn throughput_on(url: &str, tasks: usize, rows: &mut Vec<Row>) {
    let store = MemcachedStore::connect(url).await.expect("connect");
    let locks = LockManager::new(store).with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let address = url.trim_start_matches("memcache://").to_owned();
    let raw: Raw = Arc::new((0..tasks).map(|_| Mutex::new(None)).collect());
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
    let by_hand = {
        let address = address.clone();
        let raw = Arc::clone(&raw);
        op(move |task| {
            let raw = Arc::clone(&raw);
            let address = address.clone();
            async move {
                let mut slot = raw[task].lock().await;
                if slot.is_none() {
                    let stream = TcpStream::connect(&address).await.expect("connect");
                    stream.set_nodelay(true).expect("nodelay");
                    *slot = Some(BufReader::new(stream));
                }
                let stream = slot.as_mut().expect("connected");
                raw_pair(stream, task).await;
            }
        })
    };
    let samples = interleaved(tasks, &[("lock-core", ours), ("by hand", by_hand)]).await;
    rows.push(Row {
        section: "memcached",
        what: format!("uncontended pairs, lock-core API, {tasks} task(s)"),
        value: samples.median(0),
        unit: "pairs/s",
        baseline_name: "the same meta commands by hand".to_owned(),
        baseline: samples.median(1),
        target: Some(Target::RatioAtLeast(0.95)),
        paired: samples.paired(0, 1),
    });
}

/// An acquire and a release with the commands lock-core sends: `ms ME`
/// (add with a TTL), then `mg v c` and `md C<cas>` (compare-and-delete).
async fn raw_pair(stream: &mut BufReader<TcpStream>, task: usize) {
    let key = format!("bench:raw:{task}");
    let token = "0123456789abcdef0123456789abcdef@bench:1";
    let set = format!("ms {key} {} T31 ME\r\n{token}\r\n", token.len());
    stream
        .get_mut()
        .write_all(set.as_bytes())
        .await
        .expect("ms");
    let mut line = String::new();
    stream.read_line(&mut line).await.expect("ms reply");
    assert!(line.starts_with("HD"), "uncontended: {line}");
    stream
        .get_mut()
        .write_all(format!("mg {key} v c\r\n").as_bytes())
        .await
        .expect("mg");
    line.clear();
    stream.read_line(&mut line).await.expect("mg reply");
    let mut words = line.split_whitespace();
    let length: usize = words
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VA length");
    let cas = words
        .find_map(|word| word.strip_prefix('c'))
        .expect("cas")
        .to_owned();
    let mut value = vec![0u8; length + 2];
    stream.read_exact(&mut value).await.expect("value");
    assert_eq!(&value[..length], token.as_bytes(), "ours");
    stream
        .get_mut()
        .write_all(format!("md {key} C{cas}\r\n").as_bytes())
        .await
        .expect("md");
    line.clear();
    stream.read_line(&mut line).await.expect("md reply");
    assert!(line.starts_with("HD"), "deleted: {line}");
}

pub(crate) async fn handoffs(url: &str, rows: &mut Vec<Row>) {
    let store = MemcachedStore::connect(url).await.expect("connect");
    let locks = LockManager::new(store).with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let ours = handoff(&locks, 200, Duration::from_millis(3)).await;
    // A waiter in another process hears nothing of the release: it wakes
    // when its nap for the holder's remaining TTL ends. A 2 s lease keeps
    // the rounds short; the nap is the point.
    let elsewhere = LockManager::new(MemcachedStore::connect(url).await.expect("connect"))
        .with_prefix(locks.prefix());
    let mut naps = Vec::new();
    for round in 0..5 {
        let name = format!("bench:elsewhere:{round}");
        let lease = Duration::from_secs(2);
        let holder = locks
            .lock(name.as_str(), lease)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let waiter = {
            let lock = elsewhere
                .lock(name.as_str(), lease)
                .wait_for(Duration::from_secs(10));
            tokio::spawn(async move {
                let guard = lock.acquire().await.expect("acquire");
                (Instant::now(), guard)
            })
        };
        tokio::time::sleep(Duration::from_millis(3)).await;
        let released_at = Instant::now();
        holder.release().await.expect("release");
        let (acquired_at, guard) = waiter.await.expect("waiter");
        guard
            .expect("the waiter got it")
            .release()
            .await
            .expect("release");
        naps.push(acquired_at - released_at);
    }
    naps.sort();
    push_handoff(
        rows,
        "memcached",
        "a waiter in this process",
        &ours,
        "a waiter in another process (TTL nap, 2 s lease)",
        &naps,
        Some(1000.0),
    );
}
