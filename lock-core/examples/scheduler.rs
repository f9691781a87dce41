//! A scheduler's "one server per minute": every process ticks at each slot
//! and calls the report task, and the lock lets exactly one of them run it.
//!
//! The task is declared the way a production scheduler would declare it:
//!
//! ```text
//! #[locked(name = "report:{minute}", ttl = "50s", at_least = "50s", shared)]
//! async fn minute_report(minute: u64) -> Result<(), lock_core::Error>
//! ```
//!
//! - `name = "report:{minute}"`: one lock per slot, so slots never block
//!   each other.
//! - `at_least = "50s"`: the report takes a moment, but the claim on the slot
//!   stands for 50 s after it was taken. A process whose tick comes late (a
//!   pause, a busy runtime, a clock a little behind) finds the slot taken and
//!   skips it, instead of running it a second time after the first process
//!   has already released.
//! - `ttl = "50s"`: the longest the report may take; if the process running it
//!   dies, the store frees the claim then.
//! - `shared`: on a per-process store (no Redis configured) every process
//!   would take its own lock and every slot would run once per process; the
//!   call refuses to run instead, and `registry::verify()` says so at start.
//!
//! Start it in two terminals at once, against the same Redis:
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p lock-core --features redis --example scheduler -- 2 5
//! ```
//!
//! The first argument is the slot length in seconds (default 60: a minute);
//! the second, how many slots to run (default 5). With `2`, a slot is two
//! seconds, so the demo takes seconds. Every slot is reported by exactly one
//! of the processes; the other prints that it skipped it.
//!
//! The guarantee, stated honestly: the claim lives in Redis, so exclusion
//! holds across processes as long as the report finishes within `ttl` and a
//! late tick comes within `at_least` of the first. A slot's key lingers in
//! Redis for `at_least` and then expires on its own.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::{Error, LockManager, RedisStore, locked, registry};

/// Builds the report for one slot, unless another process already has.
///
/// `#[locked]` makes it return `Result<Option<()>, Error>`: `Ok(None)` when
/// another process holds (or recently ran) the slot.
#[locked(name = "report:{minute}", ttl = "50s", at_least = "50s", shared)]
async fn minute_report(minute: u64) -> Result<(), Error> {
    println!(
        "slot {minute}: building the report in process {}",
        std::process::id()
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let period = parse_arg(args.next(), 60, "the slot length in seconds")?;
    let slots = parse_arg(args.next(), 5, "the number of slots")?;
    if period == 0 {
        return Err("the slot length must be at least one second".into());
    }

    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!(
            "REDIS_URL is not set. This example shows one run per slot across processes, \
             which needs a store every process shares; on the per-process memory store \
             each process would run every slot. Start Redis and run:\n\
             REDIS_URL=redis://127.0.0.1:6379 cargo run -p lock-core --features redis \
             --example scheduler -- 2 5"
        );
        std::process::exit(2);
    };
    let store = RedisStore::connect(&url).await?;
    registry::install(LockManager::new(store).with_prefix("scheduler-example:"))?;
    // Every `shared` declaration is checked against the installed manager.
    registry::verify()?;

    println!(
        "process {}: running {slots} slot(s) of {period} s",
        std::process::id()
    );
    for _ in 0..slots {
        let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
        let slot = now.as_secs() / period + 1;
        let starts = Duration::from_secs(slot * period);
        tokio::time::sleep(starts.saturating_sub(now)).await;
        match minute_report(slot).await? {
            Some(()) => println!("slot {slot}: reported"),
            None => println!("slot {slot}: skipped, another process has it"),
        }
    }
    Ok(())
}

fn parse_arg(arg: Option<String>, default: u64, what: &str) -> Result<u64, String> {
    match arg {
        None => Ok(default),
        Some(text) => text
            .parse()
            .map_err(|_| format!("`{text}` is not a whole number; give {what}, like {default}")),
    }
}
