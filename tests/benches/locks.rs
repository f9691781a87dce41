//! lock-core measured against its baselines, in one run.
//!
//! ```sh
//! cargo bench -p lock-tests --bench locks -- --json target/locks.json
//! ```
//!
//! Every figure is printed next to the baseline it is compared with, measured
//! in the same run, and the ratio against the target. Throughput figures are
//! the median of interleaved rounds (A B C D A B C D ...), so a slow spell on
//! a shared machine hits every contender alike. Redis comes from `REDIS_URL`,
//! or a `redis-server` the harness starts on a free port.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::{Error, LockManager, MemoryStore, RedisStore, registry};

#[path = "locks/elections.rs"]
mod elections;
#[path = "locks/etcd.rs"]
mod etcd;
#[path = "locks/memcached.rs"]
mod memcached;
#[path = "locks/postgres.rs"]
mod postgres;
#[path = "locks/readers.rs"]
mod readers;
#[path = "locks/sentinel.rs"]
mod sentinel;
use redis::aio::ConnectionManager;
use serde_json::{Value, json};

const TTL: Duration = Duration::from_secs(30);
const ROUNDS: usize = 12;
const ROUND: Duration = Duration::from_millis(400);

/// One comparison: a figure, its baseline, and the target for their ratio.
struct Row {
    section: &'static str,
    what: String,
    value: f64,
    unit: &'static str,
    baseline_name: String,
    baseline: f64,
    /// `Some((op, bound))`: the ratio (or, for absolute targets, the value)
    /// must be `op` `bound`.
    target: Option<Target>,
    /// For throughput: the median over rounds of value/baseline measured
    /// back to back in the same round, which cancels slow drift in the
    /// machine's speed better than a ratio of medians.
    paired: Option<f64>,
}

#[derive(Clone, Copy)]
enum Target {
    /// value / baseline >= bound
    RatioAtLeast(f64),
    /// value <= bound (absolute, in the row's unit)
    AtMost(f64),
    /// value / baseline <= bound: for costs.
    RatioAtMost(f64),
}

impl Row {
    fn ratio(&self) -> f64 {
        if let Some(paired) = self.paired {
            return paired;
        }
        if self.baseline == 0.0 {
            f64::NAN
        } else {
            self.value / self.baseline
        }
    }

    fn target_text(&self) -> String {
        match self.target {
            None => "-".to_owned(),
            Some(Target::RatioAtLeast(bound)) => format!(">= {bound}x"),
            Some(Target::AtMost(bound)) => format!("<= {bound} {}", self.unit),
            Some(Target::RatioAtMost(bound)) => format!("<= {bound}x"),
        }
    }

    fn met(&self) -> Option<bool> {
        self.target.map(|target| match target {
            Target::RatioAtLeast(bound) => self.ratio() >= bound,
            Target::AtMost(bound) => self.value <= bound,
            Target::RatioAtMost(bound) => self.ratio() <= bound,
        })
    }

    fn json(&self) -> Value {
        json!({
            "section": self.section,
            "what": self.what,
            "value": self.value,
            "unit": self.unit,
            "baseline_name": self.baseline_name,
            "baseline": self.baseline,
            "ratio": self.ratio(),
            "target": self.target_text(),
            "met": self.met(),
        })
    }
}

fn main() {
    let json_path = json_path_from_args();
    let started = Instant::now();
    let mut rows = Vec::new();

    // `LOCKS_BENCH=redis-throughput` (say) runs only the sections whose
    // name contains it: for profiling one part.
    let only = std::env::var("LOCKS_BENCH").unwrap_or_default();
    let wanted = |section: &str| section.contains(only.as_str());

    // Memory first: it needs no server.
    if wanted("memory-throughput") {
        memory_throughput(&mut rows);
    }
    if wanted("memory-bytes") {
        memory_bytes_per_lock(&mut rows);
    }
    if wanted("memory-metrics") {
        memory_metrics_cost(&mut rows);
    }
    if wanted("memory-per-call") {
        memory_lock_per_call(&mut rows);
    }

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        if wanted("memory-handoff") {
            memory_handoff(&mut rows).await;
        }
        if wanted("memory-contention") {
            memory_contention(&mut rows).await;
        }
        if wanted("memory-readers") {
            readers::memory_readers(&mut rows).await;
        }
        if wanted("memcached") {
            if let Some(url) = lock_tests::memcached::memcached_url() {
                let thread_url = url.clone();
                let measured = std::thread::spawn(move || {
                    let mut measured = Vec::new();
                    memcached::throughput(&thread_url, &mut measured);
                    measured
                })
                .join()
                .expect("the memcached throughput thread");
                rows.extend(measured);
                memcached::handoffs(&url, &mut rows).await;
            } else {
                eprintln!("no memcached: its figures are missing from this run");
            }
        }
        if wanted("etcd") {
            if let Some(endpoints) = lock_tests::etcd::etcd_endpoints() {
                let thread_endpoints = endpoints.clone();
                let measured = std::thread::spawn(move || {
                    let mut measured = Vec::new();
                    etcd::throughput(&thread_endpoints, &mut measured);
                    measured
                })
                .join()
                .expect("the etcd throughput thread");
                rows.extend(measured);
                etcd::handoff(&endpoints, &mut rows).await;
            } else {
                eprintln!("no etcd: its figures are missing from this run");
            }
        }
        if wanted("postgres") {
            if let Some(url) = lock_tests::postgres::postgres_url() {
                let thread_url = url.clone();
                let measured = std::thread::spawn(move || {
                    let mut measured = Vec::new();
                    postgres::throughput(&thread_url, &mut measured);
                    measured
                })
                .join()
                .expect("the PostgreSQL throughput thread");
                rows.extend(measured);
                postgres::handoff_and_table(&url, &mut rows).await;
            } else {
                eprintln!("no PostgreSQL: its figures are missing from this run");
            }
        }
        if wanted("redis-replica-acks") {
            let measured = std::thread::spawn(|| {
                let mut measured = Vec::new();
                sentinel::throughput(&mut measured);
                measured
            })
            .join()
            .expect("the replica-acks thread");
            rows.extend(measured);
        }
        if wanted("elections") {
            let measured = std::thread::spawn(|| {
                let mut measured = Vec::new();
                elections::failover(&mut measured);
                measured
            })
            .join()
            .expect("the elections thread");
            rows.extend(measured);
        }
        if wanted("redis-readers") {
            if let Some(url) = lock_tests::harness::redis_url() {
                let measured = std::thread::spawn(move || {
                    let mut measured = Vec::new();
                    for (tasks, runtime) in runtimes() {
                        runtime.block_on(readers::redis_readers(&url, tasks, &mut measured));
                    }
                    measured
                })
                .join()
                .expect("the Redis readers thread");
                rows.extend(measured);
            } else {
                eprintln!("no Redis: the Redis reader figures are missing from this run");
            }
        }
        if !wanted("redis-throughput")
            && !wanted("redis-default-runtime")
            && !wanted("redis-handoff")
            && !wanted("redis-contention")
            && !wanted("redis-fleet")
        {
            return;
        }
        let Some(url) = lock_tests::harness::redis_url() else {
            eprintln!("no Redis: the Redis figures are missing from this run");
            return;
        };
        if wanted("redis-throughput") {
            // Runtimes of its own: leave this one.
            let url = url.clone();
            let mut measured = Vec::new();
            std::thread::spawn(move || {
                redis_throughput(&url, &mut measured);
                measured
            })
            .join()
            .map(|measured| rows.extend(measured))
            .expect("the Redis throughput thread");
        }
        if wanted("redis-default-runtime") {
            let url = url.clone();
            let mut measured = Vec::new();
            std::thread::spawn(move || {
                redis_default_runtime(&url, &mut measured);
                measured
            })
            .join()
            .map(|measured| rows.extend(measured))
            .expect("the Redis default-runtime thread");
        }
        if wanted("redis-handoff") {
            redis_handoff(&url, &mut rows).await;
        }
        if wanted("redis-contention") {
            redis_contention(&url, &mut rows).await;
        }
        if wanted("redis-fleet") {
            redis_fleet(&url, &mut rows).await;
        }
    });

    print_table(&rows);
    println!(
        "\nmachine: {} logical cores; whole run {:.1?}",
        std::thread::available_parallelism().map_or(0, usize::from),
        started.elapsed()
    );
    if let Some(path) = json_path {
        let path = std::path::absolute(&path).unwrap_or_else(|_| path.into());
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let path = path.display().to_string();
        let document = json!({
            "rows": rows.iter().map(Row::json).collect::<Vec<_>>(),
            "cores": std::thread::available_parallelism().map_or(0, usize::from),
            "seconds": started.elapsed().as_secs_f64(),
        });
        std::fs::write(
            &path,
            serde_json::to_string_pretty(&document).expect("json"),
        )
        .unwrap_or_else(|e| panic!("writing {path}: {e}"));
        println!("figures written to {path}");
    }
}

/// `--json <path>` among the arguments (cargo bench passes `--bench` too).
fn json_path_from_args() -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == "--json")
        .and_then(|at| args.get(at + 1).cloned())
}

fn print_table(rows: &[Row]) {
    println!(
        "\n{:<10} {:<44} {:>14} {:<28} {:>14} {:>8} {:>14} {:>5}",
        "section", "figure", "value", "baseline", "baseline value", "ratio", "target", "met"
    );
    println!("{}", "-".repeat(146));
    for row in rows {
        let met = match row.met() {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "",
        };
        println!(
            "{:<10} {:<44} {:>14} {:<28} {:>14} {:>8.3} {:>14} {:>5}",
            row.section,
            row.what,
            format_value(row.value, row.unit),
            row.baseline_name,
            format_value(row.baseline, row.unit),
            row.ratio(),
            row.target_text(),
            met
        );
    }
}

fn format_value(value: f64, unit: &str) -> String {
    match unit {
        "pairs/s" | "sections/s" => format!("{value:.0}/s"),
        "us" => format!("{value:.1} us"),
        "ns" => format!("{value:.1} ns"),
        "bytes" => format!("{value:.0} B"),
        _ => format!("{value:.3} {unit}"),
    }
}

/// Runs `op` in `tasks` tasks for `ROUND`, `ROUNDS` times interleaved with
/// the other contenders, and returns the median operations per second of each.
async fn interleaved(tasks: usize, contenders: &[(&str, Op)]) -> Samples {
    // Warm-up: connections, scripts, allocator.
    for (_, op) in contenders {
        rate(tasks, Duration::from_millis(300), op.clone()).await;
    }
    let mut samples = vec![Vec::new(); contenders.len()];
    for round in 0..ROUNDS {
        // A B C, then C B A: neither contender always runs first.
        let mut order: Vec<usize> = (0..contenders.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for index in order {
            let op = contenders[index].1.clone();
            samples[index].push(rate(tasks, ROUND, op).await);
        }
    }
    Samples(samples)
}

/// Per contender, its rate in each round.
struct Samples(Vec<Vec<f64>>);

impl Samples {
    fn median(&self, contender: usize) -> f64 {
        median(self.0[contender].clone())
    }

    /// Median over rounds of `of` / `against`, each pair measured in the
    /// same round.
    fn paired(&self, of: usize, against: usize) -> Option<f64> {
        let ratios = self.0[of]
            .iter()
            .zip(&self.0[against])
            .map(|(of, against)| of / against)
            .collect();
        Some(median(ratios))
    }
}

/// Operations per second of `op` run back to back in `tasks` tasks for `span`.
async fn rate(tasks: usize, span: Duration, op: Op) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + span;
    let workers: Vec<_> = (0..tasks)
        .map(|task| {
            let op = op.clone();
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                while Instant::now() < deadline {
                    op(task).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("benchmark task");
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1e6
}

/// One benchmarked operation, run by task number.
type Op = Arc<dyn Fn(usize) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

fn op<F, Fut>(f: F) -> Op
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    Arc::new(move |task| Box::pin(f(task)))
}

/// Runs each contender for `ROUND` in `tasks` tasks, `rounds` times, the
/// order rotating every round (A B C, B C A, C A B...), and returns every
/// contender's rate per round.
async fn rotated(tasks: usize, rounds: usize, contenders: &[(&str, Op)]) -> Samples {
    for (_, op) in contenders {
        rate(tasks, Duration::from_millis(300), op.clone()).await;
    }
    let mut samples = vec![Vec::new(); contenders.len()];
    for round in 0..rounds {
        for offset in 0..contenders.len() {
            let index = (round + offset) % contenders.len();
            samples[index].push(rate(tasks, ROUND, contenders[index].1.clone()).await);
        }
    }
    Samples(samples)
}

// ---------------------------------------------------------------- memory

fn memory_throughput(rows: &mut Vec<Row>) {
    // A 2-worker runtime, as the targets say.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        for tasks in [1, 64] {
            let locks = LockManager::memory();
            // One lock per task, built once, as the baseline's keys are.
            let per_task: Arc<Vec<lock_core::Lock>> = Arc::new(
                (0..tasks)
                    .map(|task| locks.lock(format!("bench:{task}"), TTL))
                    .collect(),
            );
            let lock_core_op = op(move |task| {
                let lock = per_task[task].clone();
                async move {
                    let guard = lock.acquire().await.expect("acquire").expect("uncontended");
                    guard.release().await.expect("release");
                }
            });
            // The baseline: the least a process-local lease table can do, a
            // locked HashMap with insert-if-absent and compare-remove.
            let table: Arc<Mutex<HashMap<String, u64>>> = Arc::default();
            let keys: Arc<Vec<String>> = Arc::new(
                (0..tasks)
                    .map(|task| format!("lock:bench:{task}"))
                    .collect(),
            );
            let tokens = Arc::new(AtomicU64::new(0));
            let baseline_op = op(move |task| {
                let table = Arc::clone(&table);
                let keys = Arc::clone(&keys);
                let token = tokens.fetch_add(1, Ordering::Relaxed);
                async move {
                    let key = &keys[task];
                    {
                        let mut table = table.lock().expect("unpoisoned");
                        if !table.contains_key(key) {
                            table.insert(key.clone(), token);
                        }
                    }
                    let mut table = table.lock().expect("unpoisoned");
                    if table.get(key) == Some(&token) {
                        table.remove(key);
                    }
                }
            });
            let rates = interleaved(
                tasks,
                &[("lock-core", lock_core_op), ("mutex-hashmap", baseline_op)],
            )
            .await;
            rows.push(Row {
                section: "memory",
                what: format!("uncontended acquire+release, {tasks} task(s)"),
                value: rates.median(0),
                unit: "pairs/s",
                baseline_name: "Mutex<HashMap> insert/remove".to_owned(),
                baseline: rates.median(1),
                // One task with the Lock reused must reach 0.6x (the Lock
                // built per call, its own row, 0.5x); 64 tasks 0.5x.
                target: Some(Target::RatioAtLeast(if tasks == 1 { 0.6 } else { 0.5 })),
                paired: rates.paired(0, 1),
            });
        }
    });
}

/// What the `metrics` feature adds to a memory acquire+release when no
/// recorder is installed: the pair's metric updates timed alone, against the
/// pair itself (which makes them), in paired rounds on one thread.
///
/// Only in a build with the feature (`--features metrics`); every other row
/// measures lock-core's default build, so this one says how to run it.
#[cfg(not(feature = "metrics"))]
fn memory_metrics_cost(_rows: &mut Vec<Row>) {
    eprintln!(
        "memory-metrics: not measured: this build leaves out lock-core's `metrics` feature; \
         run LOCKS_BENCH=memory-metrics cargo bench -p lock-tests --bench locks --features metrics"
    );
}

/// What the `metrics` feature adds (see the build without it above).
#[cfg(feature = "metrics")]
fn memory_metrics_cost(rows: &mut Vec<Row>) {
    const PAIRS: u32 = 200_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let locks = LockManager::memory();
    let lock = locks.lock("bench:metrics", TTL);
    let pair_ns = || {
        runtime.block_on(async {
            let started = Instant::now();
            for _ in 0..PAIRS {
                let guard = lock.acquire().await.expect("acquire").expect("free");
                guard.release().await.expect("release");
            }
            started.elapsed().as_nanos() as f64 / f64::from(PAIRS)
        })
    };
    let updates_ns = || {
        let started = Instant::now();
        for _ in 0..PAIRS {
            lock_core::__private::metrics_of_one_pair("bench:metrics", "memory", started);
        }
        started.elapsed().as_nanos() as f64 / f64::from(PAIRS)
    };
    pair_ns();
    updates_ns();
    let (mut pairs, mut updates, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..9 {
        let pair = pair_ns();
        let update = updates_ns();
        ratios.push(update / pair);
        pairs.push(pair);
        updates.push(update);
    }
    rows.push(Row {
        section: "memory",
        what: "metrics updates of one pair, no recorder installed".to_owned(),
        value: median(updates),
        unit: "ns",
        baseline_name: "the acquire+release pair (1 task)".to_owned(),
        baseline: median(pairs),
        target: Some(Target::RatioAtMost(0.25)),
        paired: Some(median(ratios)),
    });
}

/// Resident memory of this process, from `/proc/self/status` (Linux).
fn resident_bytes() -> Option<usize> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Resident memory per held lock beyond its key, with a million held: the
/// growth of the process's resident set, so allocator overhead and the hash
/// table's spare capacity count too.
fn memory_bytes_per_lock(rows: &mut Vec<Row>) {
    const HELD: usize = 1_000_000;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let store = MemoryStore::new();
        let locks = LockManager::new(store.clone());
        let names: Vec<String> = (0..HELD).map(|i| format!("bench:held:{i}")).collect();
        let key_bytes: usize = names.iter().map(|name| "lock:".len() + name.len()).sum();
        let Some(before) = resident_bytes() else {
            eprintln!("no /proc/self/status: bytes per held lock not measured");
            return;
        };
        for name in &names {
            let guard = locks
                .lock(name.as_str(), Duration::from_secs(3600))
                .acquire()
                .await
                .expect("acquire")
                .expect("free");
            guard.keep();
        }
        let after = resident_bytes().unwrap_or(before);
        assert_eq!(store.len(), HELD, "every lock is held");
        let per_lock = after.saturating_sub(before) as f64 / HELD as f64;
        let key_per_lock = key_bytes as f64 / HELD as f64;
        rows.push(Row {
            section: "memory",
            what: format!("resident bytes per held lock beyond its key, {HELD} held"),
            value: per_lock - key_per_lock,
            unit: "bytes",
            baseline_name: "key bytes per lock".to_owned(),
            baseline: key_per_lock,
            target: Some(Target::AtMost(256.0)),
            paired: None,
        });
    });
}

async fn memory_handoff(rows: &mut Vec<Row>) {
    let locks = LockManager::memory();
    let latencies = handoff(&locks, 500, Duration::from_millis(1)).await;
    let polling = polling_handoff_memory(30).await;
    push_handoff(
        rows,
        "memory",
        "lock-core in memory",
        &latencies,
        "100 ms polling waiter",
        &polling,
        Some(50.0),
    );
    // The runtime's own floor: the same harness with a tokio Mutex, rounds
    // alternating between the two so both see the same machine.
    let (mut ours, mut floor) = (Vec::new(), Vec::new());
    for round in 0..500 {
        if round % 2 == 0 {
            ours.extend(handoff(&locks, 1, Duration::from_millis(1)).await);
            floor.push(tokio_mutex_handoff(Duration::from_millis(1)).await);
        } else {
            floor.push(tokio_mutex_handoff(Duration::from_millis(1)).await);
            ours.extend(handoff(&locks, 1, Duration::from_millis(1)).await);
        }
    }
    ours.sort();
    floor.sort();
    rows.push(Row {
        section: "memory",
        what: format!(
            "handoff p50 against the runtime's floor ({} rounds, 2 workers)",
            ours.len()
        ),
        value: percentile(&ours, 0.5),
        unit: "us",
        baseline_name: "tokio::sync::Mutex handoff p50".to_owned(),
        baseline: percentile(&floor, 0.5),
        target: Some(Target::RatioAtMost(1.3)),
        paired: None,
    });
}

/// One handoff through a `tokio::sync::Mutex`, timed as [`handoff`] times
/// ours: from the holder letting go to the waiting task holding it.
async fn tokio_mutex_handoff(settle: Duration) -> Duration {
    let mutex = Arc::new(tokio::sync::Mutex::new(()));
    let holder = Arc::clone(&mutex).lock_owned().await;
    let waiter = {
        let mutex = Arc::clone(&mutex);
        tokio::spawn(async move {
            let guard = mutex.lock_owned().await;
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(settle).await;
    let released_at = Instant::now();
    drop(holder);
    let (acquired_at, _guard) = waiter.await.expect("waiter");
    acquired_at - released_at
}

async fn memory_contention(rows: &mut Vec<Row>) {
    let locks = LockManager::memory();
    let (sections, per_task) = contention_with(&locks, 1, Duration::ZERO).await;
    rows.push(Row {
        section: "memory",
        what: "64 tasks on one lock with wait".to_owned(),
        value: sections,
        unit: "sections/s",
        baseline_name: "-".to_owned(),
        baseline: 0.0,
        target: None,
        paired: None,
    });
    push_fairness(rows, "memory", "one lock, empty sections", &per_task);
    // Sections long enough for every release to find waiters queued.
    let (_, per_task) = contention_with(&locks, 1, Duration::from_millis(2)).await;
    push_fairness(rows, "memory", "one lock, 2 ms sections", &per_task);
}

/// How evenly contending tasks were served: the fewest sections any one
/// task ran, against the most.
fn push_fairness(rows: &mut Vec<Row>, section: &'static str, what: &str, per_task: &[u64]) {
    let fewest = per_task.iter().copied().min().unwrap_or(0);
    let most = per_task.iter().copied().max().unwrap_or(0);
    rows.push(Row {
        section,
        what: format!("fairness on the {what}: fewest sections of a task"),
        value: fewest as f64,
        unit: "sections",
        baseline_name: "most sections of a task".to_owned(),
        baseline: most as f64,
        target: None,
        paired: None,
    });
}

// ---------------------------------------------------------------- shared

/// Handoff latency: a holder releases while a waiter is already waiting; from
/// just before the release call to the waiter holding the lock.
async fn handoff(locks: &LockManager, rounds: usize, settle: Duration) -> Vec<Duration> {
    let mut latencies = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let name = format!("bench:handoff:{round}:{}", rand::random::<u32>());
        let holder = locks
            .lock(name.as_str(), TTL)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let waiter = {
            let lock = locks
                .lock(name.as_str(), TTL)
                .wait_for(Duration::from_secs(10));
            tokio::spawn(async move {
                let guard = lock.acquire().await.expect("acquire");
                (Instant::now(), guard)
            })
        };
        tokio::time::sleep(settle).await;
        let released_at = Instant::now();
        holder.release().await.expect("release");
        let (acquired_at, guard) = waiter.await.expect("waiter");
        guard
            .expect("the waiter got it")
            .release()
            .await
            .expect("release");
        latencies.push(acquired_at - released_at);
    }
    latencies.sort();
    latencies
}

/// The reference module's waiter: try, and on failure sleep a fixed 100 ms.
/// The holder releases at a random point of the polling period.
async fn polling_handoff_memory(rounds: usize) -> Vec<Duration> {
    let locks = LockManager::memory();
    let mut latencies = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let name = format!("bench:polling:{round}");
        let holder = locks
            .lock(name.as_str(), TTL)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let lock = locks.lock(name.as_str(), TTL);
        let waiter = tokio::spawn(async move {
            loop {
                if let Some(guard) = lock.acquire().await.expect("acquire") {
                    return (Instant::now(), guard);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        tokio::time::sleep(Duration::from_millis(5 + rand::random_range(0..100))).await;
        let released_at = Instant::now();
        holder.release().await.expect("release");
        let (acquired_at, guard) = waiter.await.expect("waiter");
        guard.release().await.expect("release");
        latencies.push(acquired_at - released_at);
    }
    latencies.sort();
    latencies
}

fn push_handoff(
    rows: &mut Vec<Row>,
    section: &'static str,
    name: &str,
    ours: &[Duration],
    baseline_name: &str,
    baseline: &[Duration],
    p50_target_us: Option<f64>,
) {
    rows.push(Row {
        section,
        what: format!("handoff p50, {name} ({} rounds)", ours.len()),
        value: percentile(ours, 0.5),
        unit: "us",
        baseline_name: format!("{baseline_name} p50"),
        baseline: percentile(baseline, 0.5),
        target: p50_target_us.map(Target::AtMost),
        paired: None,
    });
    rows.push(Row {
        section,
        what: format!("handoff p99, {name}"),
        value: percentile(ours, 0.99),
        unit: "us",
        baseline_name: format!("{baseline_name} p99"),
        baseline: percentile(baseline, 0.99),
        target: None,
        paired: None,
    });
}

/// Completed critical sections per second with 64 tasks on one lock, each
/// waiting for its turn.
async fn contention(locks: &LockManager) -> f64 {
    contention_with(locks, 1, Duration::ZERO).await.0
}

/// Completed critical sections per second with 64 tasks on one lock of
/// `permits` (waiting for it), each section holding it for `hold`; and how
/// many sections each task completed.
async fn contention_with(locks: &LockManager, permits: u32, hold: Duration) -> (f64, Vec<u64>) {
    contention_for(locks, 64, permits, hold, Duration::from_secs(3)).await
}

/// [`contention_with`] with `tasks` tasks, for `span`.
async fn contention_for(
    locks: &LockManager,
    tasks: usize,
    permits: u32,
    hold: Duration,
    span: Duration,
) -> (f64, Vec<u64>) {
    let name = format!("bench:contended:{}", rand::random::<u32>());
    let lock = locks
        .lock(name, TTL)
        .permits(permits)
        .wait_for(Duration::from_secs(60));
    let started = Instant::now();
    let deadline = started + span;
    let workers: Vec<_> = (0..tasks)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                let mut done = 0_u64;
                while Instant::now() < deadline {
                    let ran = lock
                        .run(async {
                            if !hold.is_zero() {
                                tokio::time::sleep(hold).await;
                            }
                            Ok::<_, Error>(())
                        })
                        .await
                        .expect("run");
                    if ran.is_some() {
                        done += 1;
                    }
                }
                done
            })
        })
        .collect();
    let mut per_task = Vec::with_capacity(workers.len());
    for worker in workers {
        per_task.push(worker.await.expect("contender"));
    }
    let total: u64 = per_task.iter().sum();
    (total as f64 / started.elapsed().as_secs_f64(), per_task)
}

// ---------------------------------------------------------------- redis

#[lock_core::locked(name = "bench:locked:{task}", ttl = "30s")]
async fn locked_noop(task: usize) {
    let _ = task;
}

/// Uncontended Redis throughput from 1 task and from 64, each on its own
/// runtime with its own connections: 1 task on a current-thread runtime, so
/// every contender sees the same scheduling, and 64 tasks on 2 workers.
fn redis_throughput(url: &str, rows: &mut Vec<Row>) {
    for (tasks, runtime) in runtimes() {
        runtime.block_on(redis_throughput_on(url, tasks, rows));
    }
}

/// The runtimes throughput is measured on: 1 task on a current-thread
/// runtime, 64 tasks on 2 workers.
fn runtimes() -> [(usize, tokio::runtime::Runtime); 2] {
    let single = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let pool = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    [(1, single), (64, pool)]
}

/// Handoff to a waiter on `waiters` (another store over the same server:
/// another process's view, woken by whatever the store offers across
/// processes) when a holder on `holders` releases; and, for 20 of the
/// rounds, to a waiter polling every 100 ms instead.
async fn handoff_across(
    holders: &LockManager,
    waiters: &LockManager,
    rounds: usize,
    settle: Duration,
) -> (Vec<Duration>, Vec<Duration>) {
    let mut ours = Vec::with_capacity(rounds);
    let mut polling = Vec::new();
    for round in 0..rounds {
        let name = format!("handoff:{round}");
        let holder = holders
            .lock(name.as_str(), TTL)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let waiter = {
            let lock = waiters
                .lock(name.as_str(), TTL)
                .wait_for(Duration::from_secs(10));
            tokio::spawn(async move {
                let guard = lock.acquire().await.expect("acquire");
                (Instant::now(), guard)
            })
        };
        tokio::time::sleep(settle).await;
        let released_at = Instant::now();
        holder.release().await.expect("release");
        let (acquired_at, guard) = waiter.await.expect("waiter");
        guard.expect("got it").release().await.expect("release");
        ours.push(acquired_at - released_at);
        if round < 20 {
            let holder = holders
                .lock(name.as_str(), TTL)
                .acquire()
                .await
                .expect("acquire")
                .expect("free");
            let lock = waiters.lock(name.as_str(), TTL);
            let poller = tokio::spawn(async move {
                loop {
                    if let Some(guard) = lock.acquire().await.expect("acquire") {
                        return (Instant::now(), guard);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            });
            tokio::time::sleep(Duration::from_millis(5 + rand::random_range(0..100))).await;
            let released_at = Instant::now();
            holder.release().await.expect("release");
            let (acquired_at, guard) = poller.await.expect("poller");
            guard.release().await.expect("release");
            polling.push(acquired_at - released_at);
        }
    }
    ours.sort();
    polling.sort();
    (ours, polling)
}

async fn redis_throughput_on(url: &str, tasks: usize, rows: &mut Vec<Row>) {
    let store = RedisStore::connect(url).await.expect("connect");
    let locks = LockManager::new(store).with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let client = redis::Client::open(url).expect("url");
    let raw: ConnectionManager = ConnectionManager::new(client).await.expect("connect");
    let release = redis::Script::new(lock_tests::raw::RELEASE);
    let rslock = rslock::LockManager::new(vec![url.to_owned()]);
    {
        let direct = lock_core_pairs(&locks, "direct", Duration::ZERO);
        // What `#[locked]` stands for, written by hand: the registry's
        // manager, a lock built per call from the name, and `run`. Both run
        // under the same task-local manager override.
        let run = {
            let locks = locks.clone();
            op(move |task| {
                registry::with_manager(locks.clone(), async move {
                    registry::manager()
                        .lock(format!("run:{task}"), TTL)
                        .run(async { Ok::<_, Error>(()) })
                        .await
                        .expect("run")
                        .expect("uncontended");
                })
            })
        };
        let attribute = {
            let locks = locks.clone();
            op(move |task| {
                registry::with_manager(locks.clone(), async move {
                    locked_noop(task)
                        .await
                        .expect("locked")
                        .expect("uncontended");
                })
            })
        };
        let raw_op = raw_pairs(&raw, &release, "bench:raw");
        let rslock_op = rslock_pairs(&rslock, "bench:rslock");
        let rates = interleaved(
            tasks,
            // Compared pairs sit next to each other in every round.
            &[
                ("rslock", rslock_op),
                ("direct", direct),
                ("raw", raw_op),
                ("run", run),
                ("attribute", attribute),
            ],
        )
        .await;
        let (rslock_rate, direct, raw, run, attribute) = (
            rates.median(0),
            rates.median(1),
            rates.median(2),
            rates.median(3),
            rates.median(4),
        );
        let raw_target = if tasks == 1 { 0.95 } else { 0.9 };
        rows.push(Row {
            section: "redis",
            what: format!("uncontended pairs, lock-core API, {tasks} task(s)"),
            value: direct,
            unit: "pairs/s",
            baseline_name: "raw SET NX PX + CAD script".to_owned(),
            baseline: raw,
            target: Some(Target::RatioAtLeast(raw_target)),
            paired: rates.paired(1, 2),
        });
        rows.push(Row {
            section: "redis",
            what: format!("uncontended pairs, lock-core API, {tasks} task(s)"),
            value: direct,
            unit: "pairs/s",
            baseline_name: "rslock".to_owned(),
            baseline: rslock_rate,
            target: (tasks == 64).then_some(Target::RatioAtLeast(1.2)),
            paired: rates.paired(1, 0),
        });
        rows.push(Row {
            section: "redis",
            what: format!("uncontended pairs, #[locked] fn, {tasks} task(s)"),
            value: attribute,
            unit: "pairs/s",
            baseline_name: "same by hand: lock(name).run".to_owned(),
            baseline: run,
            // The attribute may cost at most 3% over the code it stands for.
            target: Some(Target::RatioAtLeast(0.97)),
            paired: rates.paired(4, 3),
        });
        rows.push(Row {
            section: "redis",
            what: format!("uncontended pairs, #[locked] fn, {tasks} task(s)"),
            value: attribute,
            unit: "pairs/s",
            baseline_name: "acquire + release".to_owned(),
            baseline: direct,
            target: None,
            paired: rates.paired(4, 1),
        });
    }
}

async fn redis_handoff(url: &str, rows: &mut Vec<Row>) {
    let store = RedisStore::connect(url).await.expect("connect");
    let locks = LockManager::new(store).with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let ours = handoff(&locks, 300, Duration::from_millis(3)).await;

    // The reference module's waiter on Redis: SET NX PX, else sleep 100 ms.
    let client = redis::Client::open(url).expect("url");
    let raw: ConnectionManager = ConnectionManager::new(client).await.expect("connect");
    let mut polling = Vec::new();
    for round in 0..30 {
        let key = format!("bench:poll:{round}:{}", rand::random::<u32>());
        let mut connection = raw.clone();
        let _: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg("holder")
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut connection)
            .await
            .expect("SET");
        let waiter = {
            let mut connection = raw.clone();
            let key = key.clone();
            tokio::spawn(async move {
                loop {
                    let set: Option<String> = redis::cmd("SET")
                        .arg(&key)
                        .arg("waiter")
                        .arg("NX")
                        .arg("PX")
                        .arg(30_000)
                        .query_async(&mut connection)
                        .await
                        .expect("SET");
                    if set.is_some() {
                        return Instant::now();
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(5 + rand::random_range(0..100))).await;
        let released_at = Instant::now();
        let _: i64 = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .expect("DEL");
        let acquired_at = waiter.await.expect("waiter");
        let _: i64 = redis::cmd("DEL")
            .arg(&key)
            .query_async(&mut connection)
            .await
            .expect("DEL");
        polling.push(acquired_at - released_at);
    }
    polling.sort();

    // rslock's own waiting: `acquire` retries until it gets the lock.
    let rslock = rslock::LockManager::new(vec![url.to_owned()]);
    let mut retrying = Vec::new();
    for round in 0..30 {
        let resource = format!("bench:rslock-wait:{round}:{}", rand::random::<u32>());
        let holder = rslock
            .lock(resource.as_bytes(), TTL)
            .await
            .expect("rslock lock");
        let waiter = {
            let rslock = rslock.clone();
            let resource = resource.clone();
            tokio::spawn(async move {
                let guard = rslock
                    .acquire(resource.as_bytes(), TTL)
                    .await
                    .expect("rslock acquire");
                (Instant::now(), guard)
            })
        };
        tokio::time::sleep(Duration::from_millis(5 + rand::random_range(0..100))).await;
        let released_at = Instant::now();
        rslock.unlock(&holder).await;
        let (acquired_at, guard) = waiter.await.expect("waiter");
        guard.release().await;
        retrying.push(acquired_at - released_at);
    }
    retrying.sort();

    push_handoff(
        rows,
        "redis",
        "lock-core on Redis",
        &ours,
        "100 ms polling waiter",
        &polling,
        Some(1000.0),
    );
    push_handoff(
        rows,
        "redis",
        "lock-core on Redis",
        &ours,
        "rslock acquire retry",
        &retrying,
        None,
    );
}

async fn redis_contention(url: &str, rows: &mut Vec<Row>) {
    let store = RedisStore::connect(url).await.expect("connect");
    let locks = LockManager::new(store).with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let sections = contention(&locks).await;
    rows.push(Row {
        section: "redis",
        what: "64 tasks on one lock with wait".to_owned(),
        value: sections,
        unit: "sections/s",
        baseline_name: "-".to_owned(),
        baseline: 0.0,
        target: None,
        paired: None,
    });
    // A semaphore of 4 against the single lock, 64 tasks each holding it
    // for 2 ms per section: throughput, and how evenly the tasks were served.
    let hold = Duration::from_millis(2);
    let (single, single_tasks) = contention_with(&locks, 1, hold).await;
    let (semaphore, semaphore_tasks) = contention_with(&locks, 4, hold).await;
    rows.push(Row {
        section: "redis",
        what: "64 tasks on a semaphore of 4, 2 ms sections".to_owned(),
        value: semaphore,
        unit: "sections/s",
        baseline_name: "the same on one lock".to_owned(),
        baseline: single,
        target: None,
        paired: None,
    });
    for (what, per_task) in [
        ("semaphore of 4", semaphore_tasks),
        ("one lock", single_tasks),
    ] {
        push_fairness(rows, "redis", what, &per_task);
    }
}

/// Redis's own CPU time so far (user + system), from `INFO cpu`.
async fn redis_cpu(data: &mut redis::aio::MultiplexedConnection) -> Duration {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(data)
        .await
        .expect("INFO cpu");
    let seconds: f64 = info
        .lines()
        .filter_map(|line| {
            let (field, value) = line.trim().split_once(':')?;
            matches!(field, "used_cpu_user" | "used_cpu_sys").then(|| value.parse::<f64>().ok())?
        })
        .sum();
    Duration::from_secs_f64(seconds)
}

/// 16 tasks taking turns on one lock with `wait` while K other stores (as
/// other processes of a fleet would) are connected and idle: contended
/// handoffs per second and Redis CPU per handoff, for K = 0, 50 and 200.
/// Releases are published on the lock's own channel, which only processes
/// waiting for that lock subscribe to, so the idle stores cost nothing.
///
/// 5 rounds; in each, every K is measured for 1.5 s, in a rotating order
/// (the idle stores connected or dropped to make K), and each figure is the
/// median over rounds of its ratio to the same round's K = 0.
async fn redis_fleet(url: &str, rows: &mut Vec<Row>) {
    const FLEETS: [usize; 3] = [0, 50, 200];
    const FLEET_ROUNDS: usize = 5;
    let mut data = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let store = RedisStore::connect(url).await.expect("connect");
    let locks = LockManager::new(store).with_prefix(format!("bench:{}:", rand::random::<u32>()));
    let mut idle = Vec::new();
    // Per K: (handoffs/s, CPU µs per handoff) of each round.
    let mut measured: Vec<Vec<(f64, f64)>> = vec![Vec::new(); FLEETS.len()];
    for round in 0..FLEET_ROUNDS {
        for offset in 0..FLEETS.len() {
            let at = (round + offset) % FLEETS.len();
            let fleet = FLEETS[at];
            idle.truncate(fleet);
            while idle.len() < fleet {
                idle.push(
                    RedisStore::connect(url)
                        .await
                        .expect("connect an idle store"),
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let cpu_before = redis_cpu(&mut data).await;
            let (rate, per_task) =
                contention_for(&locks, 16, 1, Duration::ZERO, Duration::from_millis(1500)).await;
            let cpu = redis_cpu(&mut data).await.saturating_sub(cpu_before);
            let handoffs = per_task.iter().sum::<u64>().max(1);
            measured[at].push((rate, cpu.as_secs_f64() * 1e6 / handoffs as f64));
        }
    }
    let base = measured[0].clone();
    for (at, fleet) in FLEETS.into_iter().enumerate() {
        let rounds = &measured[at];
        let compared = fleet > 0;
        let rates = || rounds.iter().map(|(rate, _)| *rate);
        let cpus = || rounds.iter().map(|(_, cpu)| *cpu);
        let paired = |of: fn(&(f64, f64)) -> f64| {
            median(
                rounds
                    .iter()
                    .zip(&base)
                    .map(|(r, b)| of(r) / of(b))
                    .collect(),
            )
        };
        rows.push(Row {
            section: "redis",
            what: format!("16 tasks taking turns, {fleet} idle stores connected"),
            value: median(rates().collect()),
            unit: "handoffs/s",
            baseline_name: "no idle stores".to_owned(),
            baseline: median(base.iter().map(|(rate, _)| *rate).collect()),
            target: compared.then_some(Target::RatioAtLeast(0.8)),
            paired: Some(paired(|(rate, _)| *rate)),
        });
        rows.push(Row {
            section: "redis",
            what: format!("Redis CPU per handoff, {fleet} idle stores connected"),
            value: median(cpus().collect()),
            unit: "us",
            baseline_name: "no idle stores".to_owned(),
            baseline: median(base.iter().map(|(_, cpu)| *cpu).collect()),
            target: compared.then_some(Target::RatioAtMost(1.5)),
            paired: Some(paired(|(_, cpu)| *cpu)),
        });
    }
}

/// Uncontended lock-core pairs, each task on `<prefix>:<task>`, the `Lock`
/// built per call, waiting up to `wait` (as `#[locked(wait = ...)]` does)
/// if it were ever held.
fn lock_core_pairs(locks: &LockManager, prefix: &'static str, wait: Duration) -> Op {
    let locks = locks.clone();
    op(move |task| {
        let lock = locks.lock(format!("{prefix}:{task}"), TTL).wait_for(wait);
        async move {
            let guard = lock.acquire().await.expect("acquire").expect("uncontended");
            guard.release().await.expect("release");
        }
    })
}

/// Uncontended pairs of the hand-written baseline on `connection` (cloned
/// per call), each task on `<prefix>:<task>`.
fn raw_pairs<C>(connection: &C, release: &redis::Script, prefix: &'static str) -> Op
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync + 'static,
{
    let (connection, release) = (connection.clone(), release.clone());
    op(move |task| {
        let mut connection = connection.clone();
        let release = release.clone();
        async move {
            lock_tests::raw::pair(&mut connection, &release, &format!("{prefix}:{task}")).await;
        }
    })
}

/// Uncontended rslock pairs, each task on `<prefix>:<task>`.
fn rslock_pairs(rslock: &rslock::LockManager, prefix: &'static str) -> Op {
    let rslock = rslock.clone();
    op(move |task| {
        let rslock = rslock.clone();
        async move {
            let resource = format!("{prefix}:{task}");
            let lock = rslock
                .lock(resource.as_bytes(), TTL)
                .await
                .expect("rslock: uncontended");
            rslock.unlock(&lock).await;
        }
    })
}

/// What a new user measures on the default runtime (2 workers here): every
/// task locking its own name, lock-core against a raw loop on one
/// `MultiplexedConnection` (cloned per task) and against rslock, 9 rounds
/// with the order rotating, each figure the median of per-round ratios.
fn redis_default_runtime(url: &str, rows: &mut Vec<Row>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let store = RedisStore::connect(url).await.expect("connect");
        let locks =
            LockManager::new(store).with_prefix(format!("bench:{}:", rand::random::<u32>()));
        let client = redis::Client::open(url).expect("url");
        let multiplexed = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let release = redis::Script::new(lock_tests::raw::RELEASE);
        let rslock = rslock::LockManager::new(vec![url.to_owned()]);
        for tasks in [1, 64] {
            let ours = lock_core_pairs(&locks, "mt", Duration::ZERO);
            let raw = raw_pairs(&multiplexed, &release, "bench:mt-raw");
            let theirs = rslock_pairs(&rslock, "bench:mt-rslock");
            let waiting = lock_core_pairs(&locks, "mt-wait", Duration::from_secs(2));
            let rates = rotated(
                tasks,
                9,
                &[
                    ("lock-core", ours),
                    ("raw", raw),
                    ("rslock", theirs),
                    ("lock-core waiting", waiting),
                ],
            )
            .await;
            rows.push(Row {
                section: "redis",
                what: format!("default runtime, uncontended pairs, {tasks} task(s)"),
                value: rates.median(0),
                unit: "pairs/s",
                baseline_name: "raw loop on one MultiplexedConnection".to_owned(),
                baseline: rates.median(1),
                target: Some(Target::RatioAtLeast(0.95)),
                paired: rates.paired(0, 1),
            });
            rows.push(Row {
                section: "redis",
                what: format!("default runtime, uncontended pairs, {tasks} task(s)"),
                value: rates.median(0),
                unit: "pairs/s",
                baseline_name: "rslock".to_owned(),
                baseline: rates.median(2),
                target: (tasks == 64).then_some(Target::RatioAtLeast(1.2)),
                paired: rates.paired(0, 2),
            });
            // The same pairs with a wait, as `#[locked(wait = "2s")]` runs
            // them: found free, they cost what a plain acquire does.
            rows.push(Row {
                section: "redis",
                what: format!("default runtime, uncontended pairs with wait, {tasks} task(s)"),
                value: rates.median(3),
                unit: "pairs/s",
                baseline_name: "raw loop on one MultiplexedConnection".to_owned(),
                baseline: rates.median(1),
                target: None,
                paired: rates.paired(3, 1),
            });
        }
    });
}

/// The memory store measured the way every `#[locked]` call runs: the `Lock`
/// built per call with `manager.lock(name, ttl)`, acquired and released,
/// against a `Mutex<HashMap>` insert-if-absent of an owned key and a
/// compare-remove of a `u128` token; 1 task on the default runtime.
fn memory_lock_per_call(rows: &mut Vec<Row>) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let locks = LockManager::memory();
        let ours = op(move |task| {
            let lock = locks.lock(format!("per-call:{task}"), TTL);
            async move {
                let guard = lock.acquire().await.expect("acquire").expect("uncontended");
                guard.release().await.expect("release");
            }
        });
        let table: Arc<Mutex<HashMap<String, u128>>> = Arc::default();
        let baseline = op(move |task| {
            let table = Arc::clone(&table);
            async move { lock_tests::raw::mutex_pair(&table, &format!("lock:per-call:{task}")) }
        });
        let rates = rotated(1, 9, &[("lock-core", ours), ("mutex-hashmap", baseline)]).await;
        rows.push(Row {
            section: "memory",
            what: "uncontended acquire+release, Lock built per call, 1 task, default runtime"
                .to_owned(),
            value: rates.median(0),
            unit: "pairs/s",
            baseline_name: "Mutex<HashMap> owned key + u128 token".to_owned(),
            baseline: rates.median(1),
            target: Some(Target::RatioAtLeast(0.5)),
            paired: rates.paired(0, 1),
        });
    });
}
