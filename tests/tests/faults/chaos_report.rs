//! The fault harness's report catches what it claims to: each figure that
//! must be 0 is shown to be non-zero on records that break it, written with
//! the workers' own statements (or, where timing matters, by hand).

use std::time::Duration;

use lock_tests::chaos::report::{Context, Report};
use lock_tests::chaos::resource::Schema;
use lock_tests::chaos::run::LeasesLeft;
use lock_tests::chaos::{FaultKind, StoreKind};
use lock_tests::postgres::{client, postgres_url};
use serde_json::Value;

fn context(store: StoreKind) -> Context {
    Context {
        store,
        seed: 1,
        duration: Duration::from_secs(1),
        workers: 2,
        names: 1,
        ran_for: Duration::from_secs(1),
        supported: Vec::new(),
        skipped: Vec::new(),
        injected: Vec::new(),
        fault_failures: Vec::new(),
        faults_left_out: 0,
        leases_left: LeasesLeft::default(),
        workers_expected: Vec::new(),
        working: (0.0, 0.0),
        expects_activity: false,
    }
}

/// A schema with one name, and a client on it; `None` when PostgreSQL is
/// missing (after the notice).
async fn records() -> Option<(tokio_postgres::Client, Schema)> {
    let url = postgres_url()?;
    let client = client(&url).await;
    let schema = Schema::fresh();
    schema.create(&client, 1).await.expect("the schema");
    Some((client, schema))
}

async fn report(client: &tokio_postgres::Client, schema: &Schema, store: StoreKind) -> Value {
    report_with(client, schema, context(store)).await
}

async fn report_with(client: &tokio_postgres::Client, schema: &Schema, context: Context) -> Value {
    let report = Report::compute(client, schema, context)
        .await
        .expect("the report");
    schema.drop(client).await.expect("drop the schema");
    serde_json::from_str(&report.json()).expect("the report is JSON")
}

/// Claims `n0` with `fence` for `worker`: the interval's id, and the value
/// read (`None`: refused).
async fn claim(
    client: &tokio_postgres::Client,
    schema: &Schema,
    worker: &str,
    fence: i64,
) -> (i64, Option<i64>) {
    let row = client
        .query_one(
            &schema.statements().claim,
            &[
                &"n0",
                &worker,
                &fence,
                &(rand::random::<u32>() as i64),
                &0_i64,
            ],
        )
        .await
        .expect("claim");
    (row.get(0), row.get(1))
}

/// Writes `value` to `n0` with `fence` for interval `id`: accepted or not.
async fn write(
    client: &tokio_postgres::Client,
    schema: &Schema,
    id: i64,
    fence: i64,
    value: i64,
) -> bool {
    let row = client
        .query_one(&schema.statements().write, &[&"n0", &fence, &value, &id])
        .await
        .expect("write");
    row.get::<_, Option<i64>>(0).is_some()
}

// Two holders given the same fence (a store whose counter was lost and
// handed the number out again): the second reads before the first writes,
// and both writes land. The report must call the later write stale and
// count the update it lost.
#[tokio::test]
async fn a_fence_handed_out_twice_shows_as_a_stale_write_accepted_and_a_lost_update() {
    let Some((client, schema)) = records().await else {
        return;
    };
    let (a, read_a) = claim(&client, &schema, "w0#0", 5).await;
    let (b, read_b) = claim(&client, &schema, "w1#0", 5).await;
    assert_eq!((read_a, read_b), (Some(0), Some(0)), "both read 0");
    assert!(write(&client, &schema, b, 5, 1).await, "b's write lands");
    assert!(
        write(&client, &schema, a, 5, 1).await,
        "so does a's: the fence cannot tell them apart"
    );
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["fenced"]["stale_writes_accepted"], 1, "{json}");
    assert_eq!(json["fenced"]["lost_updates"], 1, "{json}");
    let violations = json["violations"].to_string();
    assert!(violations.contains("stale writes accepted"), "{violations}");
    assert!(violations.contains("lost updates"), "{violations}");
}

// The same interleaving with a higher fence for the later holder: the
// fence rejects the earlier holder's write, and nothing is lost. But two
// holders of one fenced lock at once, with no fault to explain it, is a
// double grant: the fence hides its cost, not the bug, and the run fails.
#[tokio::test]
async fn a_double_grant_of_a_fenced_lock_fails_the_run_though_the_fence_rejects_the_stale_write() {
    let Some((client, schema)) = records().await else {
        return;
    };
    let (a, _) = claim(&client, &schema, "w0#0", 5).await;
    let (b, _) = claim(&client, &schema, "w1#0", 6).await;
    assert!(
        write(&client, &schema, b, 6, 1).await,
        "the newer write lands"
    );
    assert!(
        !write(&client, &schema, a, 5, 1).await,
        "the older holder's write is refused"
    );
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["fenced"]["stale_writes_rejected"], 1, "{json}");
    assert_eq!(json["fenced"]["stale_writes_accepted"], 0, "{json}");
    assert_eq!(json["fenced"]["lost_updates"], 0, "{json}");
    assert_eq!(json["fenced"]["unexplained_overlaps"], 1, "{json}");
    assert_eq!(
        json["violations"],
        serde_json::json!(["unexplained overlaps of fenced sections: 1 (must be 0)"]),
        "{json}"
    );
}

// A store that forgot its fence counter hands out a lower fence than one
// already used: the resource refuses the new holder, which the report
// must show as fences going back.
#[tokio::test]
async fn a_fence_lower_than_one_already_used_shows_as_fences_going_back() {
    let Some((client, schema)) = records().await else {
        return;
    };
    let (a, _) = claim(&client, &schema, "w0#0", 70).await;
    assert!(write(&client, &schema, a, 70, 1).await, "the first write");
    let (refused, read) = claim(&client, &schema, "w1#0", 3).await;
    assert_eq!(read, None, "refused: the row has seen 70");
    // The refused call began to wait after the holder of 70 had claimed.
    attempt_for(&client, &schema, "w1#0", refused, "now()").await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["fenced"]["reads_refused_fence_went_back"], 1, "{json}");
    assert!(
        json["violations"].to_string().contains("fences went back"),
        "{json}"
    );
}

/// Records the call of `worker` that opened interval `id`, begun waiting
/// at the SQL time `began`.
async fn attempt_for(
    client: &tokio_postgres::Client,
    schema: &Schema,
    worker: &str,
    id: i64,
    began: &str,
) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".attempts (worker, name, mode, wait_started, finished, outcome,
                                                interval_id)
                 VALUES ($1, 'n0', 'fenced', {began}, now(), 'refused', $2)",
                schema.0
            ),
            &[&worker, &id],
        )
        .await
        .expect("attempt");
}

// A holder frozen between its acquire and its read comes back with a lease
// long gone and is refused by the holder after it: the fence working, not
// going back.
#[tokio::test]
async fn a_holder_refused_by_one_that_came_after_it_is_not_a_fence_going_back() {
    let Some((client, schema)) = records().await else {
        return;
    };
    let began = "clock_timestamp()";
    let (later, _) = claim(&client, &schema, "w1#0", 11).await;
    assert!(
        write(&client, &schema, later, 11, 1).await,
        "the later holder writes"
    );
    let (refused, read) = claim(&client, &schema, "w0#0", 10).await;
    assert_eq!(read, None, "refused: the row has seen 11");
    // It began to wait before the holder of 11 claimed the row.
    attempt_for(
        &client,
        &schema,
        "w0#0",
        refused,
        &format!("{began} - interval '1 minute'"),
    )
    .await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["fenced"]["reads_refused_fence_went_back"], 0, "{json}");
    assert_eq!(json["violations"], serde_json::json!([]), "{json}");
}

/// Inserts a plain interval of `n0` for `worker`, opened at the fixed
/// instant and never closed (its holder was killed in it).
async fn never_closed(client: &tokio_postgres::Client, schema: &Schema, worker: &str) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".intervals (name, mode, worker, started)
                 VALUES ('n0', 'plain', $1, '2026-01-01'::timestamptz)",
                schema.0
            ),
            &[&worker],
        )
        .await
        .expect("an interval its holder never closed");
}

/// Inserts a plain interval of `n0` for `worker` from `from` to `to`
/// seconds after a fixed instant.
async fn plain_interval(
    client: &tokio_postgres::Client,
    schema: &Schema,
    worker: &str,
    from: f64,
    to: f64,
) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".intervals (name, mode, worker, started, ended)
                 VALUES ('n0', 'plain', $1,
                         '2026-01-01'::timestamptz + $2::float8 * interval '1 second',
                         '2026-01-01'::timestamptz + $3::float8 * interval '1 second')",
                schema.0
            ),
            &[&worker, &from, &to],
        )
        .await
        .expect("interval");
}

/// As [`plain_interval`], with the lease's acquire sent at `requested`.
async fn plain_interval_requested(
    client: &tokio_postgres::Client,
    schema: &Schema,
    worker: &str,
    requested: f64,
    (from, to): (f64, f64),
) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".intervals (name, mode, worker, started, ended, requested)
                 VALUES ('n0', 'plain', $1,
                         '2026-01-01'::timestamptz + $2::float8 * interval '1 second',
                         '2026-01-01'::timestamptz + $3::float8 * interval '1 second',
                         '2026-01-01'::timestamptz + $4::float8 * interval '1 second')",
                schema.0
            ),
            &[&worker, &from, &to, &requested],
        )
        .await
        .expect("interval");
}

async fn fault(
    client: &tokio_postgres::Client,
    schema: &Schema,
    kind: FaultKind,
    target: &str,
    from: f64,
    to: f64,
) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".faults (kind, target, started, ended)
                 VALUES ($1, $2, '2026-01-01'::timestamptz + $3::float8 * interval '1 second',
                         '2026-01-01'::timestamptz + $4::float8 * interval '1 second')",
                schema.0
            ),
            &[&kind.name(), &target, &from, &to],
        )
        .await
        .expect("fault");
}

// Two unfenced sections of one name at once, with no fault to explain
// them, break the lease model: the report must fail the run.
#[tokio::test]
async fn an_overlap_no_fault_explains_fails_the_run() {
    let Some((client, schema)) = records().await else {
        return;
    };
    plain_interval(&client, &schema, "w0#0", 0.0, 1.0).await;
    plain_interval(&client, &schema, "w1#0", 0.5, 0.7).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    let overlaps = json["unfenced"]["overlaps"].as_array().expect("overlaps");
    assert_eq!(overlaps.len(), 1, "{json}");
    assert_eq!(overlaps[0]["cause"], Value::Null, "{json}");
    assert!(
        json["violations"]
            .to_string()
            .contains("unexplained overlaps"),
        "{json}"
    );
}

// The same overlap while the first holder was paused is the overlap the
// lease model allows: explained, and not a failure.
#[tokio::test]
async fn an_overlap_during_a_pause_of_the_earlier_holder_is_explained_by_it() {
    let Some((client, schema)) = records().await else {
        return;
    };
    plain_interval(&client, &schema, "w0#0", 0.0, 6.0).await;
    plain_interval(&client, &schema, "w1#0", 4.0, 4.1).await;
    fault(&client, &schema, FaultKind::Pause, "w0#0", 0.2, 5.2).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    let overlaps = json["unfenced"]["overlaps"].as_array().expect("overlaps");
    assert_eq!(overlaps.len(), 1, "{json}");
    assert_eq!(overlaps[0]["cause"], "pause", "{json}");
    assert_eq!(json["violations"], serde_json::json!([]), "{json}");
}

/// Inserts an attempt on `n0` by `worker` that waited from `from` to `to`
/// and gave up.
async fn busy_attempt(
    client: &tokio_postgres::Client,
    schema: &Schema,
    worker: &str,
    from: f64,
    to: f64,
) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".attempts (worker, name, mode, wait_started, finished, outcome)
                 VALUES ($1, 'n0', 'plain',
                         '2026-01-01'::timestamptz + $2::float8 * interval '1 second',
                         '2026-01-01'::timestamptz + $3::float8 * interval '1 second', 'busy')",
                schema.0
            ),
            &[&worker, &from, &to],
        )
        .await
        .expect("attempt");
}

/// A release of `n0` by `w0#0` at 0.1 s while `w1#0` waited from 0.05 s
/// to 2.05 s, and nobody took the lock before 3 s: a waiter left waiting.
async fn left_waiting(client: &tokio_postgres::Client, schema: &Schema) {
    plain_interval(client, schema, "w0#0", 0.0, 0.1).await;
    busy_attempt(client, schema, "w1#0", 0.05, 2.05).await;
    plain_interval(client, schema, "w0#0", 3.0, 3.1).await;
}

// A waiter that was waiting when the lock was released, and still waiting
// well after, with the lock free all along: a lost wakeup.
#[tokio::test]
async fn a_waiter_left_waiting_after_a_release_is_counted() {
    let Some((client, schema)) = records().await else {
        return;
    };
    left_waiting(&client, &schema).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["waiters_slept_past_release"], 1, "{json}");
    assert!(
        json["violations"]
            .to_string()
            .contains("slept past a release"),
        "{json}"
    );
}

// Memcached has no cross-process wakeups: the same record is shown, but
// it is what that store does, not a failure.
#[tokio::test]
async fn a_waiter_left_waiting_on_memcached_is_shown_but_expected() {
    let Some((client, schema)) = records().await else {
        return;
    };
    left_waiting(&client, &schema).await;
    let json = report(&client, &schema, StoreKind::Memcached).await;
    assert_eq!(json["waiters_slept_past_release"], 1, "{json}");
    assert_eq!(json["violations"], serde_json::json!([]), "{json}");
}

// A holder killed while it held the lock, and the name refused to
// another worker long after its lease must have ended: a stuck lock. The
// same wait with nobody asking for the name is only an unwanted name.
#[tokio::test]
async fn a_name_refused_long_after_its_holder_was_killed_is_stuck() {
    for (asked, stuck) in [(true, 1), (false, 0)] {
        let Some((client, schema)) = records().await else {
            return;
        };
        never_closed(&client, &schema, "w0#0").await;
        fault(&client, &schema, FaultKind::Kill, "w0#0", 0.5, 0.5).await;
        if asked {
            busy_attempt(&client, &schema, "w1#0", 8.0, 10.0).await;
        }
        plain_interval(&client, &schema, "w1#0", 20.0, 20.1).await;
        let json = report(&client, &schema, StoreKind::Redis).await;
        assert_eq!(json["stuck_names"], stuck, "asked: {asked}: {json}");
    }
}

// A holder cut off by a partition may take its name again itself once the
// partition ends and its lost lease has run out: the name is taken, by a
// fresh lease, and a worker refused it while that lease stands was refused
// rightly, not kept out by a lease the store forgot to end.
#[tokio::test]
async fn a_name_the_lost_holder_took_again_itself_is_taken_not_stuck() {
    let Some((client, schema)) = records().await else {
        return;
    };
    plain_interval(&client, &schema, "w0#0.0", 0.0, 1.0).await;
    fault(&client, &schema, FaultKind::Partition, "w0#0", 0.5, 5.5).await;
    plain_interval(&client, &schema, "w0#0.0", 5.6, 9.0).await;
    busy_attempt(&client, &schema, "w1#0.0", 7.0, 8.9).await;
    plain_interval(&client, &schema, "w1#0.0", 9.1, 9.2).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["stuck_names"], 0, "{json}");
    let took = json["unavailable_after_holder_lost"][0]["seconds"]
        .as_f64()
        .expect("measured");
    assert!((took - 5.1).abs() < 0.01, "taken again 5.1 s after: {json}");
}

// How long a name stayed untaken is measured either way.
#[tokio::test]
async fn how_long_a_name_stayed_untaken_after_its_holder_was_killed_is_measured() {
    let Some((client, schema)) = records().await else {
        return;
    };
    never_closed(&client, &schema, "w0#0").await;
    fault(&client, &schema, FaultKind::Kill, "w0#0", 0.5, 0.5).await;
    plain_interval(&client, &schema, "w1#0", 20.0, 20.1).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    let measured = &json["unavailable_after_holder_lost"][0]["seconds"];
    assert!(
        measured.as_f64().is_some_and(|s| (s - 19.5).abs() < 0.01),
        "19.5 s untaken: {json}"
    );
}

// A waiter whose connections were being cut could not hear the release
// (its subscription reconnects with backoff): the wait is excused, as
// under a partition.
#[tokio::test]
async fn a_waiter_whose_connections_were_being_cut_is_excused() {
    let Some((client, schema)) = records().await else {
        return;
    };
    left_waiting(&client, &schema).await;
    fault(&client, &schema, FaultKind::Drop, "w1#0", -2.0, 1.0).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["waiters_slept_past_release"], 0, "{json}");
    assert_eq!(json["violations"], serde_json::json!([]), "{json}");
}

// A delay cannot lose a lease: an overlap with nothing but a delay on the
// earlier holder is a broken promise, not an explained one.
#[tokio::test]
async fn an_overlap_with_only_a_delay_on_the_earlier_holder_is_unexplained() {
    let Some((client, schema)) = records().await else {
        return;
    };
    plain_interval(&client, &schema, "w0#0", 0.0, 1.0).await;
    plain_interval(&client, &schema, "w1#0", 0.5, 0.7).await;
    fault(&client, &schema, FaultKind::Delay, "w0#0", 0.0, 3.0).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    let overlaps = json["unfenced"]["overlaps"].as_array().expect("overlaps");
    assert_eq!(overlaps[0]["cause"], Value::Null, "{json}");
    assert!(
        json["violations"].to_string().contains("unexplained"),
        "{json}"
    );
}

// etcd keeps leases through a leader change: an overlap during a failover
// there is unexplained, while on a cluster (unacknowledged writes) the
// failover explains it.
#[tokio::test]
async fn a_failover_explains_an_overlap_on_a_cluster_but_not_on_etcd() {
    for (store, explained) in [(StoreKind::Etcd, false), (StoreKind::RedisCluster, true)] {
        let Some((client, schema)) = records().await else {
            return;
        };
        plain_interval(&client, &schema, "w0#0", 0.0, 1.0).await;
        plain_interval(&client, &schema, "w1#0", 0.5, 0.7).await;
        fault(&client, &schema, FaultKind::Failover, "store", 0.1, 0.4).await;
        let json = report(&client, &schema, store).await;
        let cause = &json["unfenced"]["overlaps"][0]["cause"];
        if explained {
            assert_eq!(cause, "failover", "{store}: {json}");
        } else {
            assert_eq!(cause, &Value::Null, "{store}: {json}");
        }
    }
}

// A holder frozen between its acquire and its section starts its section
// after its lease ran out, inside the next holder's: its pause explains it.
#[tokio::test]
async fn a_pause_of_the_later_holder_before_its_section_explains_the_overlap() {
    let Some((client, schema)) = records().await else {
        return;
    };
    fault(&client, &schema, FaultKind::Pause, "w1#0", 0.0, 5.0).await;
    plain_interval(&client, &schema, "w0#0", 4.9, 5.05).await;
    // Its acquire went out before the pause.
    plain_interval_requested(&client, &schema, "w1#0", -0.1, (5.0, 5.06)).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["unfenced"]["overlaps"][0]["cause"], "pause", "{json}");
    assert_eq!(json["violations"], serde_json::json!([]), "{json}");
}

// The same overlap, but the later holder's acquire went out after its
// pause had ended: nothing froze that lease, so the pause explains
// nothing, and the run fails.
#[tokio::test]
async fn a_section_whose_acquire_went_out_after_the_pause_ended_is_not_excused_by_it() {
    let Some((client, schema)) = records().await else {
        return;
    };
    fault(&client, &schema, FaultKind::Pause, "w1#0", 0.0, 5.0).await;
    plain_interval(&client, &schema, "w0#0", 4.9, 5.3).await;
    plain_interval_requested(&client, &schema, "w1#0", 5.1, (5.2, 5.25)).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(
        json["unfenced"]["overlaps"][0]["cause"],
        Value::Null,
        "{json}"
    );
    assert!(
        json["violations"].to_string().contains("unexplained"),
        "{json}"
    );
}

// A pause explains the overlap of its own holder only: a third worker's
// overlap during it is unexplained.
#[tokio::test]
async fn a_pause_does_not_excuse_an_overlap_between_two_other_workers() {
    let Some((client, schema)) = records().await else {
        return;
    };
    fault(&client, &schema, FaultKind::Pause, "w2#0", 0.0, 5.0).await;
    plain_interval(&client, &schema, "w0#0", 1.0, 2.0).await;
    plain_interval(&client, &schema, "w1#0", 1.5, 1.6).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(
        json["unfenced"]["overlaps"][0]["cause"],
        Value::Null,
        "{json}"
    );
}

// A memcached restart forgets a holder's lease; the holder must stop once
// it can know. Frozen by a pause before then, it can know only once it runs
// again: it stops as it wakes, and the restart still explains the overlap.
// One that goes on well past its wake ignored the loss.
#[tokio::test]
async fn a_holder_frozen_before_it_could_notice_a_forgotten_lease_may_stop_as_it_wakes() {
    for (lost_ended, explained) in [(7.0, true), (9.0, false)] {
        let Some((client, schema)) = records().await else {
            return;
        };
        plain_interval(&client, &schema, "w0#0.1", 0.0, lost_ended).await;
        fault(&client, &schema, FaultKind::Restart, "store", 0.1, 0.2).await;
        fault(&client, &schema, FaultKind::Pause, "w0#0", 1.5, 6.5).await;
        plain_interval(&client, &schema, "w1#0.1", 0.8, 2.0).await;
        let json = report(&client, &schema, StoreKind::Memcached).await;
        let cause = &json["unfenced"]["overlaps"][0]["cause"];
        if explained {
            assert_eq!(cause, "restart", "ended {lost_ended}: {json}");
        } else {
            assert_eq!(cause, &Value::Null, "ended {lost_ended}: {json}");
        }
    }
}

// A Redis server whose clock jumps 5 s ahead forgets the leases it holds
// at that moment: it explains an overlap with one of those. It cannot
// shorten a lease taken after the jump (set on the clock ahead, such a lease
// lasts longer when the clock comes back), though the fault, waiting for
// the real time to catch up, lasts 7 s: a lease answered late and taken
// then overlaps unexplained.
#[tokio::test]
async fn a_server_clock_jump_explains_only_leases_it_found_in_the_store() {
    for (requested, other, explained) in [(-1.0, 0.5, true), (5.0, 6.0, false)] {
        let Some((client, schema)) = records().await else {
            return;
        };
        fault(&client, &schema, FaultKind::ServerClock, "store", 0.0, 7.0).await;
        plain_interval_requested(
            &client,
            &schema,
            "w0#0.1",
            requested,
            (requested + 0.1, other + 0.5),
        )
        .await;
        plain_interval(&client, &schema, "w1#0.1", other, other + 1.0).await;
        let json = report(&client, &schema, StoreKind::Redis).await;
        let cause = &json["unfenced"]["overlaps"][0]["cause"];
        if explained {
            assert_eq!(cause, "server-clock", "requested at {requested}: {json}");
        } else {
            assert_eq!(cause, &Value::Null, "requested at {requested}: {json}");
        }
    }
}

// A section whose start was recorded a moment after its worker's kill was
// (the signal on its way as the worker wrote it) ended with the kill: it
// overlaps nothing that began after the worker died. Before the fix it was
// open until the end of the run, and overlapped every later section.
#[tokio::test]
async fn a_section_begun_as_its_worker_was_killed_ends_with_the_kill() {
    let Some((client, schema)) = records().await else {
        return;
    };
    never_closed(&client, &schema, "w0#0.0").await;
    fault(&client, &schema, FaultKind::Kill, "w0#0", -0.0002, 0.5).await;
    plain_interval(&client, &schema, "w1#0.0", 4.0, 4.1).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["unfenced"]["overlaps"], Value::Array(vec![]), "{json}");
}

// The late fault's rival holds its name a TTL, renewing nothing: a clock
// jump that cut its lease short explains the next holder beside it, though
// it held on past the time a renewing holder would have stopped by.
#[tokio::test]
async fn a_rival_whose_lease_a_clock_jump_cut_short_holds_its_ttl_explained() {
    let Some((client, schema)) = records().await else {
        return;
    };
    fault(&client, &schema, FaultKind::ServerClock, "store", 0.0, 7.0).await;
    plain_interval_requested(&client, &schema, "rival", -0.2, (-0.2, 2.8)).await;
    plain_interval(&client, &schema, "w1#0.1", 2.5, 2.6).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(
        json["unfenced"]["overlaps"][0]["cause"], "server-clock",
        "{json}"
    );
}

/// Records a fault on the store that touched only `names`.
async fn store_fault_on(
    client: &tokio_postgres::Client,
    schema: &Schema,
    kind: FaultKind,
    (from, to): (f64, f64),
    names: &[&str],
) {
    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".faults (kind, target, started, ended, names)
                 VALUES ($1, 'store', '2026-01-01'::timestamptz + $2::float8 * interval '1 second',
                         '2026-01-01'::timestamptz + $3::float8 * interval '1 second', $4)",
                schema.0
            ),
            &[&kind.name(), &from, &to, &names],
        )
        .await
        .expect("fault");
}

// A cluster primary restarted empty forgets the leases of its own shard:
// it explains an overlap of a name it serves, not of a name on another
// shard, not one that began more than a TTL after it, and not one whose
// holder went on long after its next renewal found the lease gone.
#[tokio::test]
async fn a_cluster_restart_explains_overlaps_of_its_own_shard_s_names_only() {
    for (names, start, lost_ended, explained) in [
        (&["plain:n0"][..], 0.5, 1.5, true),
        (&["plain:n1"][..], 0.5, 1.5, false),
        (&["plain:n0"][..], 4.5, 6.0, false),
        (&["plain:n0"][..], 0.5, 6.0, false),
    ] {
        let Some((client, schema)) = records().await else {
            return;
        };
        plain_interval(&client, &schema, "w0#0", 0.0, lost_ended).await;
        plain_interval(&client, &schema, "w1#0", start, start + 0.1).await;
        store_fault_on(&client, &schema, FaultKind::Restart, (0.1, 0.4), names).await;
        let json = report(&client, &schema, StoreKind::RedisCluster).await;
        let cause = &json["unfenced"]["overlaps"][0]["cause"];
        if explained {
            assert_eq!(
                cause, "restart",
                "{names:?} at {start}, lost one ended {lost_ended}: {json}"
            );
        } else {
            assert_eq!(
                cause,
                &Value::Null,
                "{names:?} at {start}, lost one ended {lost_ended}: {json}"
            );
        }
    }
}

/// Records a call of `worker` on `n0` that finished at `at` as `outcome`.
async fn finished_call(
    client: &tokio_postgres::Client,
    schema: &Schema,
    worker: &str,
    at: f64,
    outcome: &str,
) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".attempts (worker, name, mode, wait_started, finished, outcome)
                 VALUES ($1, 'n0', 'plain',
                         '2026-01-01'::timestamptz + ($2::float8 - 0.1) * interval '1 second',
                         '2026-01-01'::timestamptz + $2::float8 * interval '1 second', $3)",
                schema.0
            ),
            &[&worker, &at, &outcome],
        )
        .await
        .expect("attempt");
}

/// Seconds since the epoch of the fixed instant the records count from.
async fn origin(client: &tokio_postgres::Client) -> f64 {
    client
        .query_one(
            "SELECT extract(epoch FROM '2026-01-01'::timestamptz)::float8",
            &[],
        )
        .await
        .expect("origin")
        .get(0)
}

// A worker whose connection broke for good stops finishing calls without
// overlapping anyone: the run must fail and name it. A worker whose calls
// only fail (errors) has not made progress either. The same gap under a
// fault on that worker is excused.
#[tokio::test]
async fn a_worker_that_finishes_no_call_for_three_ttls_without_a_fault_fails_the_run() {
    for excused in [false, true] {
        let Some((client, schema)) = records().await else {
            return;
        };
        let origin = origin(&client).await;
        for at in [1.0, 2.0, 3.0, 15.0, 16.0, 17.0, 19.0] {
            finished_call(&client, &schema, "w0#0", at, "ran").await;
        }
        finished_call(&client, &schema, "w1#0", 1.0, "busy").await;
        for at in [2.0, 5.0, 9.0, 13.0, 17.0] {
            finished_call(&client, &schema, "w1#0", at, "error").await;
        }
        finished_call(&client, &schema, "w1#1", 19.5, "ran").await;
        if excused {
            fault(&client, &schema, FaultKind::Drop, "w1#0", 1.5, 12.0).await;
            fault(&client, &schema, FaultKind::Kill, "w0#0", 3.5, 14.0).await;
        }
        let mut context = context(StoreKind::Redis);
        context.workers_expected = vec!["w0".to_owned(), "w1".to_owned()];
        context.working = (origin, origin + 20.0);
        let json = report_with(&client, &schema, context).await;
        let stalled = json["stalled_workers"].as_array().expect("stalls");
        if excused {
            assert!(stalled.is_empty(), "{json}");
        } else {
            let who: Vec<&str> = stalled
                .iter()
                .filter_map(|stall| stall["worker"].as_str())
                .collect();
            assert_eq!(who, ["w0", "w1"], "{json}");
            assert!(
                json["violations"]
                    .to_string()
                    .contains("stalled workers: 2"),
                "{json}"
            );
        }
    }
}

/// Records a call of `worker` on `n0` waiting from `from` and finished
/// at `to` as `outcome`.
async fn call_between(
    client: &tokio_postgres::Client,
    schema: &Schema,
    worker: &str,
    (from, to): (f64, f64),
    outcome: &str,
) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".attempts (worker, name, mode, wait_started, finished, outcome)
                 VALUES ($1, 'n0', 'plain',
                         '2026-01-01'::timestamptz + $2::float8 * interval '1 second',
                         '2026-01-01'::timestamptz + $3::float8 * interval '1 second', $4)",
                schema.0
            ),
            &[&worker, &from, &to, &outcome],
        )
        .await
        .expect("attempt");
}

// A call in flight when a store-wide fault ends may still be waiting for
// an answer the fault lost (a request to an etcd leader killed mid-call
// is answered at the call's bound, seconds later): the worker's fault-free
// stretch begins when that call ends, not at the fault's end. A worker
// that then finishes nothing for 3 TTLs still stalls.
#[tokio::test]
async fn a_stretch_begins_when_the_call_a_fault_caught_in_flight_ends() {
    for (next, stalled) in [(13.0, false), (17.0, true)] {
        let Some((client, schema)) = records().await else {
            return;
        };
        let origin = origin(&client).await;
        fault(&client, &schema, FaultKind::Failover, "store", 1.0, 2.0).await;
        call_between(&client, &schema, "w0#0", (0.0, 0.5), "ran").await;
        call_between(&client, &schema, "w0#0", (0.5, 7.0), "error").await;
        call_between(&client, &schema, "w0#0", (7.0, next), "busy").await;
        call_between(&client, &schema, "w0#0", (next, 19.5), "busy").await;
        let mut context = context(StoreKind::Etcd);
        context.workers_expected = vec!["w0".to_owned()];
        context.working = (origin, origin + 20.0);
        let json = report_with(&client, &schema, context).await;
        let count = json["stalled_workers"].as_array().expect("stalls").len();
        assert_eq!(
            count,
            usize::from(stalled),
            "next call ending at {next}: {json}"
        );
    }
}

// A run in which no lease was renewed, none outlived its TTL and the
// fence never rejected a write has not tested renewal or fencing: its
// zeros are not evidence, and the run fails saying so.
#[tokio::test]
async fn a_run_that_never_renewed_outlived_a_ttl_or_rejected_a_stale_write_fails() {
    let Some((client, schema)) = records().await else {
        return;
    };
    let (a, _) = claim(&client, &schema, "w0#0", 5).await;
    assert!(write(&client, &schema, a, 5, 1).await, "an ordinary write");
    let mut context = context(StoreKind::Redis);
    context.expects_activity = true;
    let json = report_with(&client, &schema, context).await;
    let violations = json["violations"].to_string();
    for figure in [
        "renewals performed: 0",
        "sections longer than the TTL: 0",
        "stale writes rejected by the fence: 0",
    ] {
        assert!(violations.contains(figure), "{figure}: {json}");
    }
}

// A name never taken again after its holder was killed is stuck, even if
// the store restarted some time later.
#[tokio::test]
async fn a_name_never_taken_again_is_stuck_whatever_happened_long_after() {
    let Some((client, schema)) = records().await else {
        return;
    };
    never_closed(&client, &schema, "w0#0").await;
    fault(&client, &schema, FaultKind::Kill, "w0#0", 0.5, 0.5).await;
    fault(&client, &schema, FaultKind::Restart, "store", 30.0, 31.0).await;
    busy_attempt(&client, &schema, "w1#0", 38.0, 40.0).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["stuck_names"], 1, "{json}");
}

// Memcached keeps whole seconds plus one: a name refused 5.2 s after its
// holder was killed (3 s ttl) and taken at 5.3 s is what that store does,
// not a stuck lock; on Redis it is.
#[tokio::test]
async fn memcached_s_longer_leases_are_not_stuck_names() {
    for (store, stuck) in [(StoreKind::Memcached, 0), (StoreKind::Redis, 1)] {
        let Some((client, schema)) = records().await else {
            return;
        };
        never_closed(&client, &schema, "w0#0").await;
        fault(&client, &schema, FaultKind::Kill, "w0#0", 0.5, 0.5).await;
        busy_attempt(&client, &schema, "w1#0", 3.7, 5.7).await;
        plain_interval(&client, &schema, "w1#0", 5.8, 5.9).await;
        let json = report(&client, &schema, store).await;
        assert_eq!(json["stuck_names"], stuck, "{store}: {json}");
    }
}

// etcd's new leader renews every lease when it takes over: a holder
// killed a second after a leader change leaves its name held past the TTL.
// That is etcd's, not a stuck lock; the same wait with no leader change is.
#[tokio::test]
async fn a_name_held_past_its_ttl_just_after_a_leader_change_is_not_stuck() {
    for (failover, stuck) in [(true, 0), (false, 1)] {
        let Some((client, schema)) = records().await else {
            return;
        };
        never_closed(&client, &schema, "w0#0").await;
        if failover {
            fault(&client, &schema, FaultKind::Failover, "store", -2.0, -1.0).await;
        }
        fault(&client, &schema, FaultKind::Kill, "w0#0", 0.0, 0.0).await;
        busy_attempt(&client, &schema, "w1#0", 4.2, 6.2).await;
        plain_interval(&client, &schema, "w1#0", 6.3, 6.4).await;
        let json = report(&client, &schema, StoreKind::Etcd).await;
        assert_eq!(
            json["stuck_names"], stuck,
            "failover before: {failover}: {json}"
        );
    }
}

// A section left open (its worker died on its own, or the harness's own
// rival was cut off as the run ended) lasts until the records are read:
// it still overlaps what came after it, and the report says so rather
// than stopping at the missing end.
#[tokio::test]
async fn a_section_left_open_overlaps_what_follows_it() {
    let Some((client, schema)) = records().await else {
        return;
    };
    plain_interval(&client, &schema, "w0#0", 0.0, 1.0).await;
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".intervals (name, mode, worker, started)
                 VALUES ('n0', 'plain', 'w1#0', '2026-01-01'::timestamptz + interval '0.5 second')",
                schema.0
            ),
            &[],
        )
        .await
        .expect("an interval left open");
    plain_interval(&client, &schema, "w2#0", 3.0, 3.5).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    let overlaps = json["unfenced"]["overlaps"].as_array().expect("overlaps");
    assert_eq!(overlaps.len(), 2, "with w0's section and with w2's: {json}");
}

// A fence handed out twice one after the other (a handover that reused
// the counter's value): neither holder overlaps the other, and the row
// takes both, since its check is `seen <= fence`. Only a figure that
// looks at the tokens themselves sees that they did not grow.
#[tokio::test]
async fn a_fence_handed_out_twice_in_turn_fails_the_run() {
    let Some((client, schema)) = records().await else {
        return;
    };
    let (a, _) = claim(&client, &schema, "w0#0", 7).await;
    assert!(write(&client, &schema, a, 7, 1).await);
    client
        .execute(
            &format!(
                "UPDATE \"{}\".intervals SET ended = clock_timestamp() WHERE id = $1",
                schema.0
            ),
            &[&a],
        )
        .await
        .expect("a's section ends");
    let (b, read_b) = claim(&client, &schema, "w1#0", 7).await;
    assert_eq!(
        read_b,
        Some(1),
        "b reads a's write: no overlap, nothing stale"
    );
    assert!(write(&client, &schema, b, 7, 2).await);
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(json["fenced"]["stale_writes_accepted"], 0, "{json}");
    let twice = json["fenced"]["fences_handed_out_twice"]
        .as_array()
        .expect("a list");
    assert_eq!(twice.len(), 1, "{json}");
    assert!(
        json["violations"]
            .to_string()
            .contains("fences handed out twice"),
        "{json}"
    );
}

/// A plain call on `n0` for `worker` that answered busy after `took`
/// seconds of a wait of `wait` seconds.
async fn busy_after(
    client: &tokio_postgres::Client,
    schema: &Schema,
    worker: &str,
    took: f64,
    wait: f64,
) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".attempts (worker, name, mode, wait_started, finished, outcome, wait_us)
                 VALUES ($1, 'n0', 'plain', '2026-01-01'::timestamptz,
                         '2026-01-01'::timestamptz + $2::float8 * interval '1 second', 'busy',
                         ($3::float8 * 1e6)::bigint)",
                schema.0
            ),
            &[&worker, &took, &wait],
        )
        .await
        .expect("a busy call");
}

// A waiter that answers "busy" before its wait is out (it judged the
// holder would outlast it, say) gives up on a lock that may yet come
// free: no overlap, no stall, no polling shows it. Waiting the wait out
// is fine, and so is taking a little longer.
#[tokio::test]
async fn a_call_that_gives_up_before_its_wait_is_out_fails_the_run() {
    let Some((client, schema)) = records().await else {
        return;
    };
    busy_after(&client, &schema, "w0#0", 2.0004, 2.0).await;
    busy_after(&client, &schema, "w1#0", 2.3, 2.0).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(
        json["gave_up_early"].as_array().map(Vec::len),
        Some(0),
        "{json}"
    );

    let Some((client, schema)) = records().await else {
        return;
    };
    busy_after(&client, &schema, "w0#0", 0.05, 2.0).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(
        json["gave_up_early"].as_array().map(Vec::len),
        Some(1),
        "{json}"
    );
    assert!(
        json["violations"]
            .to_string()
            .contains("gave up before their wait was out"),
        "{json}"
    );
}

/// A plain call on `n0` by `w0#0` that tried 40 times in 2 s.
async fn forty_tries_in_two_seconds(client: &tokio_postgres::Client, schema: &Schema) {
    client
        .execute(
            &format!(
                "INSERT INTO \"{}\".attempts (worker, name, mode, wait_started, finished, outcome, store_attempts)
                 VALUES ('w0#0', 'n0', 'plain', '2026-01-01'::timestamptz,
                         '2026-01-01'::timestamptz + interval '2 seconds', 'busy', 40)",
                schema.0
            ),
            &[],
        )
        .await
        .expect("a call that tried 40 times in 2 s");
}

// A waiter that naps a fixed 50 ms between tries sends 20 a second: within
// what a bound of 25 a second let through. With nobody releasing the lock
// meanwhile, nothing woke it that often: it polled. The same count on a
// name released 20 times while it waited is a waiter woken by each
// release (Redis Sentinel's busiest names, in ten-minute runs).
#[tokio::test]
async fn a_waiter_trying_twenty_times_a_second_polls_unless_releases_woke_it() {
    let Some((client, schema)) = records().await else {
        return;
    };
    forty_tries_in_two_seconds(&client, &schema).await;
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(
        json["polled"]["calls"].as_array().map(Vec::len),
        Some(1),
        "{json}"
    );

    let Some((client, schema)) = records().await else {
        return;
    };
    forty_tries_in_two_seconds(&client, &schema).await;
    for release in 0..20 {
        let at = 0.05 + 0.095 * f64::from(release);
        plain_interval(&client, &schema, &format!("w1#{release}"), at, at + 0.04).await;
    }
    let json = report(&client, &schema, StoreKind::Redis).await;
    assert_eq!(
        json["polled"]["calls"].as_array().map(Vec::len),
        Some(0),
        "{json}"
    );
}

// A drop fault cuts a worker's connections ten times; after each cut its
// store wakes every waiter once (a release may have gone unheard while
// the subscription was down). A waiter that tried 20 times in 2 s, with
// nothing released, was woken by the cuts if its own worker's connections
// were being cut, and polled if another worker's were.
#[tokio::test]
async fn a_waiter_whose_connections_were_cut_may_try_once_per_cut() {
    for (dropped, polled) in [("w0#0", 0), ("w1#0", 1)] {
        let Some((client, schema)) = records().await else {
            return;
        };
        client
            .execute(
                &format!(
                    "INSERT INTO \"{}\".attempts (worker, name, mode, wait_started, finished, outcome, store_attempts)
                     VALUES ('w0#0.1', 'n0', 'fenced', '2026-01-01'::timestamptz,
                             '2026-01-01'::timestamptz + interval '2 seconds', 'busy', 20)",
                    schema.0
                ),
                &[],
            )
            .await
            .expect("a call that tried 20 times in 2 s");
        fault(&client, &schema, FaultKind::Drop, dropped, -1.0, 2.0).await;
        let json = report(&client, &schema, StoreKind::RedisCluster).await;
        assert_eq!(
            json["polled"]["calls"].as_array().map(Vec::len),
            Some(polled),
            "connections of {dropped} cut: {json}"
        );
    }
}
