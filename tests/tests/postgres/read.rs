//! The read side of `PostgresStore` where the contract suite does not
//! reach: readers leaving at once, a dead writer's intent, and a lease
//! table made by a version without readers.
//!
//! Time bounds are hang guards unless the bound is the behaviour under test.

use std::time::Duration;

use lock_core::{LockManager, PostgresConfig, PostgresStore};
use lock_tests::postgres;

const LONG: Duration = Duration::from_secs(60);

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

async fn manager(url: &str, config: PostgresConfig, prefix: &str) -> LockManager {
    let store = PostgresStore::connect_with(url, config)
        .await
        .expect("connect");
    LockManager::new(store).with_prefix(prefix)
}

/// Readers share one row: when several leave at the same moment, each
/// release must take out its own token from the row as the previous one
/// left it, or a release reports false and its reader holds writers off
/// until its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_leaving_at_once_each_free_their_own_lease() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let locks = manager(&url, postgres::config(), &unique("leaving")).await;
    for round in 0..5 {
        let mut guards = Vec::new();
        for _ in 0..16 {
            let guard = locks
                .lock("shared", LONG)
                .read()
                .acquire()
                .await
                .expect("acquire")
                .expect("readers share");
            guards.push(guard);
        }
        let tasks: Vec<_> = guards
            .into_iter()
            .map(|guard| tokio::spawn(async move { guard.release().await.expect("release") }))
            .collect();
        let mut released = Vec::new();
        for task in tasks {
            released.push(task.await.expect("release task"));
        }
        assert!(
            released.iter().all(|&ok| ok),
            "round {round}: every reader's release freed its lease: {released:?}"
        );
        let held = locks.list().await.expect("list");
        assert!(held.is_empty(), "round {round}: no reader left: {held:?}");
    }
}

/// A writer that waits behind a reader and then stops waiting (it gave
/// up, or its process died) holds new readers off for its intent's 2 s at
/// most: long enough to keep readers from starving a live writer between
/// its attempts, short enough that a dead one blocks nobody for long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_stops_waiting_holds_readers_off_for_two_seconds_at_most() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let locks = manager(&url, postgres::config(), &unique("intent")).await;
    let reader = locks
        .lock("report", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let writer = locks.lock("report", LONG).wait_for(LONG);
    let cut = tokio::time::timeout(Duration::from_millis(300), writer.acquire()).await;
    assert!(cut.is_err(), "the writer was still waiting when cut off");
    assert!(
        locks
            .lock("report", LONG)
            .read()
            .acquire()
            .await
            .expect("acquire")
            .is_none(),
        "right after the writer stopped, its intent still holds new readers off"
    );
    let started = tokio::time::Instant::now();
    let late = locks
        .lock("report", LONG)
        .read()
        .wait_for(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire");
    let waited = started.elapsed();
    assert!(late.is_some(), "the intent ends and the reader gets in");
    assert!(
        waited < Duration::from_millis(2500),
        "the intent lasts 2 s after the writer's last attempt, no longer: waited {waited:?}"
    );
    drop(late);
    assert!(reader.release().await.expect("release"));
}

/// A lease table made by a version without readers, holding a live lease,
/// is upgraded in place when a store connects: the lease is still held by
/// its writer, and the name takes readers once it is released. A store
/// told not to create tables says which columns to add.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_table_from_before_readers_is_upgraded_in_place() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let id: u32 = rand::random();
    let table = format!("old_leases_{id:08x}");
    let qualified = format!("\"{}\".{table}", postgres::schema());
    let admin = postgres::client(&url).await;
    // Make sure the schema exists: a store creates it.
    drop(manager(&url, postgres::config(), "setup:").await);
    admin
        .batch_execute(&format!(
            "CREATE TABLE {qualified} (
                name text PRIMARY KEY, token text NOT NULL, holder text NOT NULL,
                acquired_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,
                waited_until timestamptz);
             CREATE TABLE {qualified}_fences (name text PRIMARY KEY, fence bigint NOT NULL);
             INSERT INTO {qualified} VALUES ('old:job', 'an-old-token@host:1', 'host:1',
                clock_timestamp(), clock_timestamp() + interval '1 minute', NULL);"
        ))
        .await
        .expect("the old table");

    let refused =
        PostgresStore::connect_with(&url, postgres::config().table(&table).create_table(false))
            .await
            .expect_err("a table without the read side's columns, not to be created");
    let message = format!("{refused:?}");
    assert!(
        message.contains("reader_tokens") && message.contains("create_table"),
        "the refusal says what to add: {message}"
    );

    let locks = manager(&url, postgres::config().table(&table), "old:").await;
    let holder = locks.lock("job", LONG).holder().await.expect("holder");
    assert_eq!(
        holder.as_ref().map(|h| h.token()),
        Some("an-old-token@host:1"),
        "the old lease survives the upgrade"
    );
    assert!(
        locks
            .lock("job", LONG)
            .read()
            .acquire()
            .await
            .expect("acquire")
            .is_none(),
        "the old writer holds readers off"
    );
    assert!(locks.lock("job", LONG).force_release().await.expect("free"));
    let readers = [
        locks
            .lock("job", LONG)
            .read()
            .acquire()
            .await
            .expect("acquire"),
        locks
            .lock("job", LONG)
            .read()
            .acquire()
            .await
            .expect("acquire"),
    ];
    assert!(
        readers.iter().all(Option::is_some),
        "the upgraded table keeps readers"
    );
    // Connecting again finds the columns and changes nothing.
    drop(manager(&url, postgres::config().table(&table), "old:").await);
    drop(
        PostgresStore::connect_with(&url, postgres::config().table(&table).create_table(false))
            .await
            .expect("the upgraded table is accepted as it is"),
    );
}

/// A writer waits while readers hold the name, and readers that came after
/// it wait behind its claim. Each reader's release used to wake one local
/// waiter whether or not it freed the name: the writer, woken while
/// readers still held, went to the back of the line, and the last reader's
/// release woke a reader the claim held off, not the writer, which then
/// slept out its renewal nap (about 1 s). The last reader's release must
/// wake the writer: it gets the name well within that nap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_readers_release_wakes_the_waiting_writer() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let locks = manager(&url, postgres::config(), &unique("last-reader")).await;
    let mut readers = Vec::new();
    for _ in 0..4 {
        let reader = locks.lock("doc", LONG).read().acquire().await;
        readers.push(reader.expect("acquire").expect("readers share"));
    }
    let writer = tokio::spawn({
        let locks = locks.clone();
        async move {
            let lock = locks.lock("doc", LONG).wait_for(Duration::from_secs(5));
            let guard = lock.acquire().await.expect("acquire");
            (guard.is_some(), std::time::Instant::now())
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let late: Vec<_> = (0..4)
        .map(|_| {
            let locks = locks.clone();
            tokio::spawn(async move {
                let lock = locks
                    .lock("doc", LONG)
                    .read()
                    .wait_for(Duration::from_secs(5));
                drop(lock.acquire().await.expect("acquire"));
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for reader in readers {
        assert!(reader.release().await.expect("release"));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let last_release = std::time::Instant::now();
    let (got, at) = writer.await.expect("writer task");
    let waited = at.saturating_duration_since(last_release);
    eprintln!("the writer got the name {waited:?} after the last reader's release");
    assert!(got, "the writer gets the name");
    assert!(
        waited < Duration::from_millis(500),
        "the writer slept {waited:?} after the last reader left, instead of being woken"
    );
    for task in late {
        task.await.expect("late reader");
    }
}
