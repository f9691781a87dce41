//! A process whose `main` takes a lock and returns with the guard still
//! bound, as a cron binary's does (`let _guard = lock.acquire().await?...`).
//!
//! ```text
//! exit-child <current-thread|multi-thread> <store-url> <prefix> <lock-name> <ttl-ms>
//!     Under a `#[tokio::main]` of that flavor: takes the lock without
//!     waiting, prints `held`, and returns from main with the guard bound,
//!     so that its drop, as main's future ends and the runtime shuts down,
//!     is all that gives the lease back. Exits 0.
//! ```
//!
//! `<store-url>` is any URL `lock_core::connect` takes (the PostgreSQL
//! table's schema from `LOCK_CHILD_PG_SCHEMA`). Any failure prints
//! `error <message>` and exits with status 1.

use std::time::Duration;

use lock_tests::children::manager;
use lock_tests::harness::say;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let done = match args.first().map(String::as_str) {
        Some("current-thread") => current_thread(&args[1..]),
        Some("multi-thread") => multi_thread(&args[1..]),
        _ => Err(format!("unknown arguments {args:?}; see the file's docs")),
    };
    if let Err(message) = done {
        say(&format!("error {message}"));
        std::process::exit(1);
    }
}

#[tokio::main(flavor = "current_thread")]
async fn current_thread(args: &[String]) -> Result<(), String> {
    hold_and_return(args).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn multi_thread(args: &[String]) -> Result<(), String> {
    hold_and_return(args).await
}

/// Takes the lock and returns with its guard in a local of the caller's
/// future: dropped as that future ends, inside `block_on`, just before the
/// runtime shuts down.
async fn hold_and_return(args: &[String]) -> Result<(), String> {
    let [url, prefix, name, ttl_ms] = args else {
        return Err(format!("unknown arguments {args:?}; see the file's docs"));
    };
    let ttl = Duration::from_millis(ttl_ms.parse().map_err(|e| format!("ttl: {e}"))?);
    let locks = manager(url, prefix).await?;
    let _guard = locks
        .lock(name, ttl)
        .acquire()
        .await
        .map_err(|e| format!("acquire: {}", e.chain()))?
        .ok_or("the lock was already held")?;
    say("held");
    Ok(())
}
