//! Leader election across processes: three candidates (`election-child`)
//! on each networked store that holds elections, their leader resigned,
//! killed (SIGKILL) or paused past its TTL (SIGSTOP, then SIGCONT), 50
//! times in all. Each takeover is timed and printed; every fenced write the
//! leaders made is checked against the terms written before it, and every
//! observer's view against the terms that led: each term shown in order,
//! and nobody shown only while nobody led.
//!
//! A leader checks its lease by the clock just before each write, and
//! stamps the write with that moment. A SIGSTOP that lands between the
//! check and the write lets the write reach the file after a newer leader
//! began, as on any resource without fencing: such a write is counted as
//! late, not as a violation, when it was decided before the newer term's
//! first. A violation is an old leader deciding to write after a newer
//! one began, which the lease's local deadline must prevent.
//!
//! A binary of its own, at most two stores' candidates at once, so that
//! the timings it prints are not those of a loaded machine.

use std::time::Duration;

use lock_tests::elections::{Failovers, failovers, mixed};
use lock_tests::{etcd, harness, postgres};

const ROUNDS: usize = 50;

/// At most two stores' runs at once, whatever `RUST_TEST_THREADS` says.
static RUNNING: std::sync::Mutex<usize> = std::sync::Mutex::new(0);
static FREED: std::sync::Condvar = std::sync::Condvar::new();

/// One of the two places to run, held while it lives.
struct Turn;

impl Turn {
    fn take() -> Turn {
        let mut running = RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while *running >= 2 {
            running = FREED
                .wait(running)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        *running += 1;
        Turn
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        *RUNNING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) -= 1;
        FREED.notify_one();
    }
}

/// Prints the run and checks what must hold whatever the timing.
fn check(store: &str, ttl: Duration, run: &Failovers) {
    let median = |what| {
        run.median(what).map_or_else(
            || "-".to_owned(),
            |d| format!("{:.1} ms", d.as_secs_f64() * 1e3),
        )
    };
    let mut lags = run.observer_lags.clone();
    lags.sort();
    let lag = lags.get(lags.len() / 2).copied().unwrap_or_default();
    eprintln!(
        "{store}: {} failovers, ttl {ttl:?}: takeover after resign {} (median), after SIGKILL {}, after SIGSTOP {}; observers {:.1} ms behind (median), {} times nobody between terms; {} writes, {} violations, {} landed late (stopped between deciding and writing)",
        run.terms.len() - 1,
        median("resign"),
        median("kill"),
        median("pause"),
        lag.as_secs_f64() * 1e3,
        run.observer_nones,
        run.writes,
        run.violations,
        run.late_writes,
    );
    assert_eq!(
        run.terms.len(),
        ROUNDS + 1,
        "a leader per round, and the first"
    );
    assert_eq!(
        run.violations, 0,
        "no old term decided to write after a newer one began"
    );
    assert!(run.writes > 0, "the leaders wrote");
    // A `None` only while nobody leads: between a term's fault and the
    // next term, at most once per observer per handover.
    assert!(
        run.observer_faults.is_empty(),
        "observers: {:?}",
        run.observer_faults
    );
    // Hang guards, many times what a correct store needs: a resignation is
    // handed over by notification, a dead leader's lease by its TTL.
    for resign in &run.takeovers["resign"] {
        assert!(
            *resign < ttl / 2,
            "a resignation is handed over at once, not by the TTL: {resign:?}"
        );
    }
    // How fast a resignation is handed over is the benchmark's to say
    // (`LOCKS_BENCH=elections`, target 50 ms): timing, not correctness.
    for kill in &run.takeovers["kill"] {
        assert!(
            *kill < ttl + Duration::from_secs(1),
            "a killed leader is replaced within TTL + 1 s: {kill:?}"
        );
    }
    // Observers hear of a new leader from the store; one left to read
    // again at the leader's expiry would be 2/3 of a TTL behind or more.
    assert!(
        lag < ttl / 2,
        "observers are told, not left to find out: {lag:?} behind"
    );
}

#[test]
fn redis_candidates_fail_over() {
    let _turn = Turn::take();
    let Some(url) = harness::redis_url() else {
        return;
    };
    let ttl = Duration::from_millis(1_000);
    let run = failovers(
        env!("CARGO_BIN_EXE_election-child"),
        &url,
        &[],
        ttl,
        &mixed(ROUNDS),
    );
    check("redis", ttl, &run);
}

#[test]
fn postgres_candidates_fail_over() {
    let _turn = Turn::take();
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let ttl = Duration::from_millis(1_000);
    let env = [("LOCK_CHILD_PG_SCHEMA", postgres::schema())];
    // The tables exist before the candidates race to create them.
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(postgres::postgres_store());
    let run = failovers(
        env!("CARGO_BIN_EXE_election-child"),
        &url,
        &env,
        ttl,
        &mixed(ROUNDS),
    );
    check("postgres", ttl, &run);
}

#[test]
fn etcd_candidates_fail_over() {
    let _turn = Turn::take();
    let Some(endpoints) = etcd::etcd_endpoints() else {
        return;
    };
    // etcd keeps whole seconds, and no lease below its minimum.
    let ttl = Duration::from_secs(3);
    let run = failovers(
        env!("CARGO_BIN_EXE_election-child"),
        &endpoints.join(","),
        &[],
        ttl,
        &mixed(ROUNDS),
    );
    check("etcd", ttl, &run);
}
