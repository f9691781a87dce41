//! Runs N uncontended acquire+release pairs one way, for counting the
//! client's instructions per pair (`scripts/instructions`):
//!
//! ```text
//! lock-pairs redis-lock-core <redis-url> <n>   lock-core's Lock on RedisStore
//! lock-pairs redis-lock-core-read <redis-url> <n>  the same, on the read side
//! lock-pairs redis-raw <redis-url> <n>         SET NX PX + a compare-and-delete script, by hand
//! lock-pairs memory-lock-core <n>              lock-core's Lock on MemoryStore, built per call
//! lock-pairs memory-mutex <n>                  Mutex<HashMap> insert-if-absent + compare-remove
//! ```
//!
//! One current-thread runtime, one task, so the count is the same run after
//! run. The script runs each mode at two values of n and divides the
//! difference, which leaves out start-up and connection setup.

use std::sync::Mutex;
use std::time::Duration;

use lock_core::{LockManager, RedisStore};

const TTL: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let count = |text: &str| text.parse::<usize>().expect("n: a whole number");
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["redis-lock-core", url, n] => runtime.block_on(redis_lock_core(url, count(n), false)),
        ["redis-lock-core-read", url, n] => {
            runtime.block_on(redis_lock_core(url, count(n), true));
        }
        ["redis-raw", url, n] => runtime.block_on(redis_raw(url, count(n))),
        ["memory-lock-core", n] => runtime.block_on(memory_lock_core(count(n))),
        ["memory-mutex", n] => runtime.block_on(memory_mutex(count(n))),
        _ => {
            eprintln!("usage: see the file's docs");
            std::process::exit(2);
        }
    }
}

async fn redis_lock_core(url: &str, n: usize, read: bool) {
    let store = RedisStore::connect(url).await.expect("connect");
    lock_core_pairs(&LockManager::new(store).with_prefix("count:"), n, read).await;
}

async fn redis_raw(url: &str, n: usize) {
    let client = redis::Client::open(url).expect("url");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let release = redis::Script::new(lock_tests::raw::RELEASE);
    for _ in 0..n {
        lock_tests::raw::pair(&mut connection, &release, "count:raw-pair").await;
    }
}

async fn memory_lock_core(n: usize) {
    lock_core_pairs(&LockManager::memory(), n, false).await;
}

/// `n` pairs on `locks`, the `Lock` built per call as `#[locked]` does; on
/// the name's read side when `read`.
async fn lock_core_pairs(locks: &LockManager, n: usize, read: bool) {
    for _ in 0..n {
        let lock = locks.lock("pair", TTL);
        let lock = if read { lock.read() } else { lock };
        let guard = lock.acquire().await.expect("acquire").expect("uncontended");
        guard.release().await.expect("release");
    }
}

/// An `async fn` run the same way as the lock-core modes, so both pay the
/// same runtime around them.
async fn memory_mutex(n: usize) {
    let table = Mutex::default();
    for _ in 0..n {
        lock_tests::raw::mutex_pair(&table, "lock:pair");
    }
}
