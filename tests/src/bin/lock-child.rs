//! A separate OS process for the cross-process tests.
//!
//! ```text
//! lock-child contend <redis-url> <prefix> <lock-name> <counter-key> <tasks> <rounds>
//!     Runs <tasks> tasks; each takes the lock <rounds> times and, under it,
//!     increments <counter-key> by GET then SET (deliberately not INCR, so an
//!     exclusion failure loses updates). Prints `done <increments>`.
//! lock-child semaphore <redis-url> <prefix> <lock-name> <permits> <count-key> <tasks> <rounds>
//!     Runs <tasks> tasks; each takes one of <permits> permits <rounds> times
//!     and, holding it, counts itself in <count-key> (INCR, a pause, DECR),
//!     raising `<count-key>:max` to the highest count seen. Prints
//!     `done <acquisitions> <fewest by one task>`.
//! lock-child fence <redis-url> <prefix> <lock-name> <list-key> <count>
//!     Takes the fenced lock <count> times in a row and, under it, appends
//!     the fencing token to <list-key> (RPUSH), so the list holds every
//!     token in acquisition order. Prints `done <count>`.
//! lock-child contend-file <store-url> <prefix> <lock-name> <path> <tasks> <rounds> <ttl-ms>
//!     As `contend`, on any store, with the counter in the file <path> (read,
//!     yield, write), under locks of <ttl-ms>. Prints `done <increments>`.
//! lock-child read-write-file <store-url> <prefix> <lock-name> <path> <writers> <readers> <rounds> <ttl-ms>
//!     <writers> tasks each take the lock <rounds> times and, under it,
//!     update a counter in the file <path> in steps another holder must
//!     never see: read it, write `writing`, yield, write the count plus
//!     one. <readers> tasks each take the lock's read side <rounds> times
//!     and read the file, counting the reads that found `writing`. Prints
//!     `done <writes> <reads> <reads that saw a write under way>`.
//! lock-child fence-file <store-url> <prefix> <lock-name> <path> <count>
//!     As `fence`, on any store that fences, appending each token to the
//!     file <path>, one per line, under the lock. Prints `done <count>`.
//! lock-child probe-wait <store-url> <prefix> <lock-name>
//!     Tries the lock once without waiting and prints `none` or `got`; then
//!     (if it did not get it) waits up to 60 s and prints `got <unix-us>`,
//!     the wall-clock microsecond it got the lock.
//! lock-child try-fenced <store-url> <prefix> <lock-name> <ttl-ms>
//!     Tries the fenced lock once, without waiting: prints `none`, or
//!     `got <fencing token>` after releasing it.
//! lock-child hold <store-url> <prefix> <lock-name> <ttl-ms>
//!     Takes the lock, prints `held`, then sleeps until killed.
//! lock-child schedule <redis-url> <prefix> <start-unix-ms> <period-ms> <slots> <lag-ms> <list-key>
//!     The scheduler of `lock-core/examples/scheduler.rs`: for each slot
//!     0..<slots>, waits until <start> + slot x <period> (plus <lag-ms> on odd
//!     slots, to play a process whose tick comes late) and calls the same
//!     `#[locked(name = "report:{minute}", ttl = "50s", at_least = "50s",
//!     shared)]` task, which appends the slot to <list-key> (RPUSH). Prints
//!     `done <ran> <skipped>`.
//! lock-child clock <faketime-timestamp-file>
//!     Run under libfaketime with that timestamp file: holds an in-memory
//!     lock while moving the wall clock 2 h forward (the lease must stand),
//!     then 2 h back (the lease must still end at its TTL). Prints `ok ...`.
//! ```
//!
//! A `<store-url>` is any URL `lock_core::connect` takes: `redis://...` (or
//! `redis+sentinel://...`), `memcache://...`, `postgres://...` (the
//! PostgreSQL table's schema from `LOCK_CHILD_PG_SCHEMA`), etcd's client
//! URLs `http://...[,http://...]`...
//!
//! Any failure prints `error <message>` and exits with status 1.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::{LockManager, locked, registry};
use lock_tests::children::manager;
use lock_tests::harness::say;
use redis::AsyncCommands;

/// How long one task waits for the lock before calling it a failure.
const WAIT: Duration = Duration::from_secs(60);

/// Long enough that no holder overruns it in a healthy run.
const TTL: Duration = Duration::from_secs(30);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(run(&args)) {
        Ok(line) => say(&line),
        Err(message) => {
            say(&format!("error {message}"));
            std::process::exit(1);
        }
    }
}

async fn run(args: &[String]) -> Result<String, String> {
    match args {
        [mode, url, prefix, name, counter, tasks, rounds] if mode == "contend" => {
            let tasks: usize = tasks.parse().map_err(|e| format!("tasks: {e}"))?;
            let rounds: usize = rounds.parse().map_err(|e| format!("rounds: {e}"))?;
            contend(url, prefix, name, counter, tasks, rounds).await
        }
        [mode, url, prefix, name, permits, count, tasks, rounds] if mode == "semaphore" => {
            let permits: u32 = permits.parse().map_err(|e| format!("permits: {e}"))?;
            let tasks: usize = tasks.parse().map_err(|e| format!("tasks: {e}"))?;
            let rounds: usize = rounds.parse().map_err(|e| format!("rounds: {e}"))?;
            semaphore(url, prefix, name, permits, count, tasks, rounds).await
        }
        [mode, url, prefix, name, list, count] if mode == "fence" => {
            let count: usize = count.parse().map_err(|e| format!("count: {e}"))?;
            fence(url, prefix, name, list, count).await
        }
        [mode, url, prefix, name, path, tasks, rounds, ttl_ms] if mode == "contend-file" => {
            let number = |text: &str, what: &str| {
                text.parse::<u64>()
                    .map_err(|e| format!("{what} {text:?}: {e}"))
            };
            let count = |text: &str, what: &str| {
                text.parse::<usize>()
                    .map_err(|e| format!("{what} {text:?}: {e}"))
            };
            let plan = FileContention {
                tasks: count(tasks, "tasks")?,
                rounds: count(rounds, "rounds")?,
                ttl: Duration::from_millis(number(ttl_ms, "ttl")?),
            };
            contend_file(url, prefix, name, path, plan).await
        }
        [
            mode,
            url,
            prefix,
            name,
            path,
            writers,
            readers,
            rounds,
            ttl_ms,
        ] if mode == "read-write-file" => {
            let count = |text: &str, what: &str| {
                text.parse::<usize>()
                    .map_err(|e| format!("{what} {text:?}: {e}"))
            };
            let ttl = Duration::from_millis(
                ttl_ms
                    .parse::<u64>()
                    .map_err(|e| format!("ttl {ttl_ms:?}: {e}"))?,
            );
            let sides = (count(writers, "writers")?, count(readers, "readers")?);
            read_write_file(
                url,
                prefix,
                name,
                path,
                sides,
                count(rounds, "rounds")?,
                ttl,
            )
            .await
        }
        [mode, url, prefix, name, path, count] if mode == "fence-file" => {
            let count: usize = count.parse().map_err(|e| format!("count: {e}"))?;
            fence_file(url, prefix, name, path, count).await
        }
        [mode, url, prefix, name] if mode == "probe-wait" => probe_wait(url, prefix, name).await,
        [mode, url, prefix, name, ttl_ms] if mode == "try-fenced" => {
            let ttl_ms: u64 = ttl_ms.parse().map_err(|e| format!("ttl: {e}"))?;
            try_fenced(url, prefix, name, Duration::from_millis(ttl_ms)).await
        }
        [mode, url, prefix, name, ttl_ms] if mode == "hold" => {
            let ttl_ms: u64 = ttl_ms.parse().map_err(|e| format!("ttl: {e}"))?;
            hold(url, prefix, name, Duration::from_millis(ttl_ms)).await
        }
        [mode, url, prefix, start, period, slots, lag, list] if mode == "schedule" => {
            let number = |text: &str, what: &str| {
                text.parse::<u64>()
                    .map_err(|e| format!("{what} {text:?}: {e}"))
            };
            let plan = Schedule {
                start: Duration::from_millis(number(start, "start")?),
                period: Duration::from_millis(number(period, "period")?),
                slots: number(slots, "slots")?,
                lag: Duration::from_millis(number(lag, "lag")?),
            };
            schedule(url, prefix, plan, list).await
        }
        [mode, timestamp_file] if mode == "clock" => clock(timestamp_file).await,
        _ => Err(format!("unknown arguments {args:?}; see the file's docs")),
    }
}

/// Takes the fenced lock `count` times in a row, appending each token to
/// the file at `path` under the lock.
async fn fence_file(
    url: &str,
    prefix: &str,
    name: &str,
    path: &str,
    count: usize,
) -> Result<String, String> {
    let locks = manager(url, prefix).await?;
    let lock = locks.lock(name, TTL).wait_for(WAIT).fenced();
    for _ in 0..count {
        let ran = lock
            .run(async {
                let fence = lock_core::current()
                    .and_then(|lease| lease.fence())
                    .ok_or_else(|| lock_core::Error::store("read the fence of", name, "none"))?;
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|e| lock_core::Error::store("append the fence to", "file", e))?;
                std::io::Write::write_all(&mut file, format!("{fence}\n").as_bytes())
                    .map_err(|e| lock_core::Error::store("append the fence to", "file", e))
            })
            .await
            .map_err(|e| e.to_string())?;
        if ran.is_none() {
            return Err(format!("waited {WAIT:?} for the lock without getting it"));
        }
    }
    Ok(format!("done {count}"))
}

/// Tries once, says so, then waits for the lock and says when it got it.
async fn probe_wait(url: &str, prefix: &str, name: &str) -> Result<String, String> {
    let locks = manager(url, prefix).await?;
    let first = locks
        .lock(name, TTL)
        .acquire()
        .await
        .map_err(|e| e.to_string())?;
    if let Some(guard) = first {
        guard.release().await.map_err(|e| e.to_string())?;
        return Ok("got".to_owned());
    }
    say("none");
    let guard = locks
        .lock(name, TTL)
        .wait_for(WAIT)
        .acquire()
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("waited {WAIT:?} without getting it"))?;
    let at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_err(|e| e.to_string())?
        .as_micros();
    guard.release().await.map_err(|e| e.to_string())?;
    Ok(format!("got {at}"))
}

struct FileContention {
    tasks: usize,
    rounds: usize,
    ttl: Duration,
}

/// Read-yield-write increments of a number in a file, each under the lock:
/// any overlap between two holders, in this process or another, loses one.
async fn contend_file(
    url: &str,
    prefix: &str,
    name: &str,
    path: &str,
    plan: FileContention,
) -> Result<String, String> {
    let locks = manager(url, prefix).await?;
    let workers = (0..plan.tasks).map(|_| {
        let lock = locks.lock(name, plan.ttl).wait_for(WAIT);
        let path = path.to_owned();
        take_turns(lock, plan.rounds, move || {
            let path = path.clone();
            async move {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let value: u64 = text.trim().parse().unwrap_or(0);
                tokio::task::yield_now().await;
                std::fs::write(&path, (value + 1).to_string())
                    .map_err(|e| lock_core::Error::store("write the counter of", "file", e))
            }
        })
    });
    let mut done = 0;
    for worker in workers.collect::<Vec<_>>() {
        done += worker.await.map_err(|e| e.to_string())??;
    }
    Ok(format!("done {done}"))
}

/// Writers updating a file in visible steps under a lock, readers reading
/// it under its read side: see the file's docs.
async fn read_write_file(
    url: &str,
    prefix: &str,
    name: &str,
    path: &str,
    (writers, readers): (usize, usize),
    rounds: usize,
    ttl: Duration,
) -> Result<String, String> {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let locks = manager(url, prefix).await?;
    let torn = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..writers {
        let lock = locks.lock(name, ttl).wait_for(WAIT);
        let path = path.to_owned();
        workers.push(take_turns(lock, rounds, move || {
            let path = path.clone();
            async move {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                let value: u64 = text.trim().parse().unwrap_or(0);
                let write = |text: String| {
                    std::fs::write(&path, text)
                        .map_err(|e| lock_core::Error::store("write the counter of", "file", e))
                };
                write("writing".to_owned())?;
                tokio::task::yield_now().await;
                tokio::time::sleep(Duration::from_millis(1)).await;
                write((value + 1).to_string())
            }
        }));
    }
    for _ in 0..readers {
        let lock = locks.lock(name, ttl).read().wait_for(WAIT);
        let (path, torn) = (path.to_owned(), Arc::clone(&torn));
        workers.push(take_turns(lock, rounds, move || {
            let (path, torn) = (path.clone(), Arc::clone(&torn));
            async move {
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                if text == "writing" {
                    torn.fetch_add(1, Ordering::SeqCst);
                }
                tokio::task::yield_now().await;
                Ok(())
            }
        }));
    }
    let mut done = Vec::new();
    for worker in workers {
        done.push(worker.await.map_err(|e| e.to_string())??);
    }
    let (writes, reads) = done.split_at(writers);
    Ok(format!(
        "done {} {} {}",
        writes.iter().sum::<usize>(),
        reads.iter().sum::<usize>(),
        torn.load(Ordering::SeqCst)
    ))
}

async fn contend(
    url: &str,
    prefix: &str,
    name: &str,
    counter: &str,
    tasks: usize,
    rounds: usize,
) -> Result<String, String> {
    let locks = manager(url, prefix).await?;
    let data = data_connection(url).await?;
    let workers = (0..tasks).map(|_| {
        let lock = locks.lock(name, TTL).wait_for(WAIT);
        let (data, counter) = (data.clone(), counter.to_owned());
        take_turns(lock, rounds, move || {
            let (mut data, counter) = (data.clone(), counter.clone());
            async move {
                let value: Option<u64> = data.get(&counter).await.map_err(fail)?;
                // Widen the window between read and write, so two holders
                // at once would lose an update.
                tokio::time::sleep(Duration::from_millis(1)).await;
                let () = data
                    .set(&counter, value.unwrap_or(0) + 1)
                    .await
                    .map_err(fail)?;
                Ok(())
            }
        })
    });
    let mut total = 0;
    for worker in workers.collect::<Vec<_>>() {
        total += worker.await.map_err(|e| format!("task: {e}"))??;
    }
    Ok(format!("done {total}"))
}

/// Counts the holders of a semaphore across processes: INCR on entry (and
/// the highest count seen kept at `<count>:max`), DECR on the way out, both
/// while holding a permit, so the count never exceeds the holders.
async fn semaphore(
    url: &str,
    prefix: &str,
    name: &str,
    permits: u32,
    count: &str,
    tasks: usize,
    rounds: usize,
) -> Result<String, String> {
    const ENTER: &str = "local now = redis.call('INCR', KEYS[1]) \
        if now > tonumber(redis.call('GET', KEYS[2]) or '0') then redis.call('SET', KEYS[2], now) end \
        return now";
    let locks = manager(url, prefix).await?;
    let data = data_connection(url).await?;
    let enter = redis::Script::new(ENTER);
    let workers = (0..tasks).map(|_| {
        let lock = locks.lock(name, TTL).permits(permits).wait_for(WAIT);
        let (data, enter) = (data.clone(), enter.clone());
        let count = count.to_owned();
        let max = format!("{count}:max");
        take_turns(lock, rounds, move || {
            let (mut data, enter) = (data.clone(), enter.clone());
            let (count, max) = (count.clone(), max.clone());
            async move {
                let _: u64 = enter
                    .key(&count)
                    .key(&max)
                    .invoke_async(&mut data)
                    .await
                    .map_err(fail)?;
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _: i64 = data.decr(&count, 1).await.map_err(fail)?;
                Ok(())
            }
        })
    });
    let (mut total, mut fewest) = (0, usize::MAX);
    for worker in workers.collect::<Vec<_>>() {
        let done = worker.await.map_err(|e| format!("task: {e}"))??;
        total += done;
        fewest = fewest.min(done);
    }
    Ok(format!("done {total} {fewest}"))
}

async fn fence(
    url: &str,
    prefix: &str,
    name: &str,
    list: &str,
    count: usize,
) -> Result<String, String> {
    let locks = manager(url, prefix).await?;
    let mut data = data_connection(url).await?;
    let lock = locks.lock(name, TTL).wait_for(WAIT).fenced();
    for _ in 0..count {
        let ran = lock
            .run(async {
                let fence = lock_core::current()
                    .and_then(|lease| lease.fence())
                    .ok_or_else(|| lock_core::Error::store("read the fence of", name, "none"))?;
                let _: usize = data.rpush(list, fence).await.map_err(fail)?;
                Ok::<_, lock_core::Error>(())
            })
            .await
            .map_err(|e| e.to_string())?;
        if ran.is_none() {
            return Err(format!("waited {WAIT:?} for the lock without getting it"));
        }
    }
    Ok(format!("done {count}"))
}

/// A connection for the data the children work on under the lock.
async fn data_connection(url: &str) -> Result<redis::aio::MultiplexedConnection, String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("data connection: {e}"))
}

/// A task that runs `work` under `lock` `rounds` times, waiting for it each
/// time; the number of rounds done, or why one could not be.
fn take_turns<F, Fut>(
    lock: lock_core::Lock,
    rounds: usize,
    work: F,
) -> tokio::task::JoinHandle<Result<usize, String>>
where
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), lock_core::Error>> + Send + 'static,
{
    tokio::spawn(async move {
        for done in 0..rounds {
            let ran = lock.run(work()).await.map_err(|e| e.to_string())?;
            if ran.is_none() {
                return Err(format!(
                    "waited {WAIT:?} for {} after {done} rounds without getting it",
                    lock.key()
                ));
            }
        }
        Ok(rounds)
    })
}

fn fail(e: redis::RedisError) -> lock_core::Error {
    lock_core::Error::store("update the counter under", "test counter", e)
}

/// One fenced attempt, no waiting: `none`, or `got <fence>` once released.
async fn try_fenced(url: &str, prefix: &str, name: &str, ttl: Duration) -> Result<String, String> {
    let locks = manager(url, prefix).await?;
    let Some(guard) = locks
        .lock(name, ttl)
        .fenced()
        .acquire()
        .await
        .map_err(|e| format!("acquire: {e}"))?
    else {
        return Ok("none".to_owned());
    };
    let fence = guard.fence().ok_or("a fenced lock came without a token")?;
    guard.release().await.map_err(|e| format!("release: {e}"))?;
    Ok(format!("got {fence}"))
}

async fn hold(url: &str, prefix: &str, name: &str, ttl: Duration) -> Result<String, String> {
    let locks = manager(url, prefix).await?;
    let guard = locks
        .lock(name, ttl)
        .acquire()
        .await
        .map_err(|e| format!("acquire: {e}"))?
        .ok_or("the lock was already held")?;
    say("held");
    // Keep the guard alive until the parent kills this process.
    tokio::time::sleep(Duration::from_secs(3600)).await;
    guard.keep();
    Err("was not killed within an hour".to_owned())
}

/// When the `schedule` mode's slots fire, as durations since the Unix epoch.
struct Schedule {
    start: Duration,
    period: Duration,
    slots: u64,
    lag: Duration,
}

/// Where a slot's run is recorded: the Redis list the parent reads.
struct RunLog {
    data: redis::aio::MultiplexedConnection,
    list: String,
}

/// The scheduled task, declared as in `lock-core/examples/scheduler.rs`.
#[locked(name = "report:{minute}", ttl = "50s", at_least = "50s", shared)]
async fn minute_report(minute: u64, log: &RunLog) -> Result<(), lock_core::Error> {
    let mut data = log.data.clone();
    let _: usize = data.rpush(&log.list, minute).await.map_err(fail)?;
    Ok(())
}

async fn schedule(url: &str, prefix: &str, plan: Schedule, list: &str) -> Result<String, String> {
    registry::install(manager(url, prefix).await?).map_err(|e| e.to_string())?;
    registry::verify().map_err(|e| e.to_string())?;
    let log = RunLog {
        data: data_connection(url).await?,
        list: list.to_owned(),
    };
    let (mut ran, mut skipped) = (0, 0);
    for slot in 0..plan.slots {
        let lag = if slot % 2 == 1 {
            plan.lag
        } else {
            Duration::ZERO
        };
        let fire = plan.start + plan.period * u32::try_from(slot).map_err(|e| e.to_string())? + lag;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_err(|e| e.to_string())?;
        tokio::time::sleep(fire.saturating_sub(now)).await;
        match minute_report(slot, &log).await.map_err(|e| e.to_string())? {
            Some(()) => ran += 1,
            None => skipped += 1,
        }
    }
    Ok(format!("done {ran} {skipped}"))
}

/// Wall-clock jumps must neither end nor stretch an in-memory lease: its TTL
/// runs on the monotonic clock.
async fn clock(timestamp_file: &str) -> Result<String, String> {
    use std::time::{Instant, SystemTime};
    const TTL: Duration = Duration::from_millis(1500);
    let jump = |offset: &str| {
        std::fs::write(timestamp_file, format!("{offset}\n"))
            .map_err(|e| format!("write {timestamp_file}: {e}"))
    };
    let wall = || {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    };
    let locks = LockManager::memory();
    let lock = locks.lock("clock", TTL);
    let acquired = Instant::now();
    let guard = lock
        .acquire()
        .await
        .map_err(|e| format!("acquire: {e}"))?
        .ok_or("a fresh memory store refused the lock")?;

    let before = wall();
    jump("+2h")?;
    let forward = wall().saturating_sub(before);
    if forward < 3600 {
        return Err(format!(
            "the wall clock moved {forward} s, not 2 h: libfaketime is not active"
        ));
    }
    if !lock.is_held().await.map_err(|e| e.to_string())? {
        return Err("a 2 h wall-clock jump forward ended the lease".to_owned());
    }

    let before = wall();
    jump("-2h")?;
    let backward = before.saturating_sub(wall());
    if backward < 3600 {
        return Err(format!("the wall clock went back {backward} s, not 4 h"));
    }
    tokio::time::sleep_until((acquired + TTL + Duration::from_millis(300)).into()).await;
    if lock.is_held().await.map_err(|e| e.to_string())? {
        return Err("a wall-clock jump back stretched the lease past its ttl".to_owned());
    }
    guard.keep();
    Ok(format!("ok forward={forward}s backward={backward}s"))
}
