//! A candidate in an election, as a separate OS process, for the failover
//! tests (`tests/elections_failover.rs`).
//!
//! ```text
//! election-child <store-url> <prefix> <name> <label> <ttl-ms> <writes-path>
//! ```
//!
//! Campaigns for the election `<name>` as `<label>`, over and over. While
//! it leads, it appends `<term> <label>` to the file `<writes-path>` every
//! 10 ms (a write whose term the file's reader checks: O_APPEND keeps the
//! processes' writes in one order), stopping the moment `lost()` resolves.
//! An observer in the same process follows the election meanwhile. It
//! prints, one per line:
//!
//! ```text
//! leading <term> <unix-us>     this process leads from then
//! lost <term> <unix-us>        its leadership ended without a resignation
//! resigned <term> <unix-us>    it resigned (the time is just before)
//! observed <term>|none         the observer's next item
//! ```
//!
//! A line `resign` on its stdin makes it resign if it leads, then wait
//! 500 ms before campaigning again (so another candidate takes over).
//! Any failure prints `error <message>` and exits with status 1.

use std::io::{BufRead, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_tests::children::manager;
use lock_tests::harness::say;
use tokio::sync::mpsc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if let Err(message) = runtime.block_on(run(&args)) {
        say(&format!("error {message}"));
        std::process::exit(1);
    }
}

async fn run(args: &[String]) -> Result<(), String> {
    let [url, prefix, name, label, ttl_ms, writes] = args else {
        return Err(
            "usage: election-child <store-url> <prefix> <name> <label> <ttl-ms> <writes-path>"
                .into(),
        );
    };
    let ttl = Duration::from_millis(ttl_ms.parse().map_err(|_| "ttl-ms: a number")?);
    let locks = manager(url, prefix).await?;
    let election = locks.election(name, ttl).label(label);
    let mut observe = election.observe();
    tokio::spawn(async move {
        loop {
            let change = observe.next_change().await;
            match change {
                Some(leader) => say(&format!("observed {}", leader.term())),
                None => say("observed none"),
            }
        }
    });
    let mut resigns = commands();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(writes)
        .map_err(|e| format!("open {writes}: {e}"))?;
    loop {
        let leadership = election
            .campaign()
            .await
            .map_err(|e| format!("campaign: {}", e.chain()))?;
        let term = leadership.term();
        say(&format!("leading {term} {}", now_us()));
        let writing = async {
            loop {
                // When the write was decided: after `lost()` was polled
                // (the select is biased), before the write itself. A
                // process stopped between the two writes late, as on any
                // resource without fencing; the reader tells that apart
                // from a leader that decided to write after it lost.
                let line = format!("{term} {label} {}\n", now_us());
                // The naive resource: it takes every write. Only stopping
                // at `lost()` keeps an old term's writes from landing after
                // a newer term's. One `write` call per line: O_APPEND puts
                // it whole after every write before it, and a process
                // paused mid-line cannot split it.
                let _ = file.write_all(line.as_bytes());
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::select! {
            biased;
            () = leadership.lost() => say(&format!("lost {term} {}", now_us())),
            Some(()) = resigns.recv() => {
                say(&format!("resigned {term} {}", now_us()));
                leadership
                    .resign()
                    .await
                    .map_err(|e| format!("resign: {}", e.chain()))?;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            () = writing => {}
        }
    }
}

/// A `()` for every `resign` line on stdin.
fn commands() -> mpsc::UnboundedReceiver<()> {
    let (send, receive) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { return };
            if line.trim() == "resign" && send.send(()).is_err() {
                return;
            }
        }
    });
    receive
}

fn now_us() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_micros()
}
