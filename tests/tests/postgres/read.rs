//! The read side of `PostgresStore` where the contract suite does not
//! reach: readers leaving at once, a writer's intent when it stops waiting
//! or dies, the readers a writer that gives up stood in front of, a late
//! call of a writer whose lease ran out, and a lease table made by a
//! version without readers.
//!
//! Time bounds are hang guards unless the bound is the behaviour under test.

use std::time::Duration;

use lock_core::{LockManager, PostgresConfig, PostgresStore};
use lock_tests::postgres;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(60);

/// Generous bound for things that should happen promptly.
const HANG_GUARD: Duration = Duration::from_secs(20);

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

/// A writer that waits behind a reader marks its intent, and new readers
/// wait behind it. One that stops waiting (here its acquire is dropped)
/// takes its intent back as it goes: a new reader gets in within a second,
/// before the intent (2 s from the writer's last attempt) would have run
/// out. One whose process died cannot: its intent runs out, and holds
/// readers off 2 s at most: long enough to keep readers from starving a
/// live writer between its attempts, short enough that a dead one blocks
/// nobody for long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_stops_waiting_takes_its_intent_back_and_a_dead_ones_runs_out_within_two_seconds()
 {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let locks = manager(&url, postgres::config(), &unique("intent")).await;
    let read = |wait: Duration| locks.lock("report", LONG).read().wait_for(wait);
    let reader = read(Duration::ZERO)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let writer = locks.lock("report", LONG).wait_for(LONG);
    let cut = tokio::time::timeout(Duration::from_millis(300), writer.acquire()).await;
    assert!(cut.is_err(), "the writer was still waiting when cut off");
    let next = read(Duration::from_secs(1))
        .acquire()
        .await
        .expect("acquire");
    assert!(
        next.is_some(),
        "the writer took its intent back as it stopped: a reader gets in before the intent \
         would have run out"
    );
    drop(next);

    // A writer that marks its intent and then runs nothing more, as one
    // whose process died: its attempt's wakeup is never dropped.
    let key = locks.lock("report", LONG).key().to_owned();
    let request = lock_core::store::AcquireRequest::new(&key, "a-dead-writer@host:1", LONG);
    let attempt = locks
        .store()
        .acquire(request.waking())
        .await
        .expect("acquire");
    let lock_core::store::Attempt::Held {
        wakeup: Some(wakeup),
        ..
    } = attempt
    else {
        panic!("the reader holds the name: the writer waits, {attempt:?}");
    };
    std::mem::forget(wakeup);
    let died = Instant::now();
    assert!(
        read(Duration::ZERO)
            .acquire()
            .await
            .expect("acquire")
            .is_none(),
        "the dead writer's intent holds new readers off"
    );
    let late = read(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire");
    let waited = died.elapsed();
    assert!(late.is_some(), "the intent ends and the reader gets in");
    assert!(
        waited < Duration::from_millis(2500),
        "the intent lasts 2 s after the writer's last attempt, no longer: waited {waited:?}"
    );
    drop(late);
    assert!(reader.release().await.expect("release"));
}

/// A writer waiting behind another *writer* makes no claim on the name, on
/// PostgreSQL as on Redis and etcd (`Lock::read`'s docs): only a writer
/// held off by readers marks its intent, and takes it back when it stops
/// waiting. Its attempt marked the row all the same, and that mark, which
/// nothing took back, held new readers off for two seconds after the
/// waiting writer's last attempt, though it had given up: here, once the
/// holder's lease ran out unreleased.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waiting_behind_a_writer_leaves_no_mark_that_holds_readers_off() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let locks = manager(&url, postgres::config(), &unique("behind-writer")).await;
    let ttl = Duration::from_secs(1);
    let holder = locks
        .lock("ledger", ttl)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let taken = Instant::now();
    // Late in the holder's lease, a writer waits for it, then gives up.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let cut = tokio::time::timeout(
        Duration::from_millis(100),
        locks.lock("ledger", LONG).wait_for(LONG).acquire(),
    )
    .await;
    assert!(cut.is_err(), "the writer was still waiting when it gave up");
    // The holder's lease is left to run out.
    holder.keep();
    tokio::time::sleep_until(taken + ttl + Duration::from_millis(300)).await;
    let reader = locks
        .lock("ledger", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire");
    assert!(
        reader.is_some(),
        "the holder's lease ran out and no writer waits: a reader gets in at once"
    );
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

/// A writer that gives up waiting lets in the readers of its process it
/// stood in front of. Two stores stand for two processes, `here` and
/// `elsewhere`. A writer of `elsewhere` holds the name for 30 s. `here` has
/// a reader waiting (it naps the writer's 30 s, unless woken) and a writer
/// waiting 2 s. The release wakes one waiter of `here`, the writer first;
/// a reader of `elsewhere` got in before it, so the writer meets that
/// reader, marks its intent, and gives up. `here`'s reader must then be let
/// in within a couple of seconds, not left asleep until the old writer's
/// TTL: nothing holds it off any more.
///
/// The release and the other reader's admission are put in the order a
/// race can put them, every run: the old writer's row is deleted without
/// a word, the reader of `elsewhere` gets in, and only then is the release
/// announced on the store's channel, as the release statement announces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_that_gives_up_lets_in_the_readers_of_its_process_it_stood_in_front_of() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let prefix = unique("gives-up");
    let here = manager(&url, postgres::config(), &prefix).await;
    let elsewhere = manager(&url, postgres::config(), &prefix).await;
    let old_ttl = Duration::from_secs(30);
    let old_writer = elsewhere
        .lock("doc", old_ttl)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let reader = tokio::spawn({
        let lock = here.lock("doc", LONG).read().wait_for(LONG);
        async move { lock.acquire().await.expect("acquire") }
    });
    let writer = tokio::spawn({
        let lock = here.lock("doc", LONG).wait_for(Duration::from_secs(2));
        async move {
            let guard = lock.acquire().await.expect("acquire");
            (guard.is_some(), Instant::now())
        }
    });
    // Both have tried and found the old writer there.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let admin = postgres::client(&url).await;
    let table = format!("\"{}\".lock_leases", postgres::schema());
    let deleted = admin
        .execute(
            &format!("DELETE FROM {table} WHERE name = $1"),
            &[&old_writer.key()],
        )
        .await
        .expect("DELETE");
    assert_eq!(deleted, 1, "the old writer's row was there");
    let key = old_writer.key().to_owned();
    old_writer.keep();
    let other_reader = elsewhere
        .lock("doc", old_ttl)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("the name is free for readers");
    admin
        .execute("SELECT pg_notify('lock_core_released', $1)", &[&key])
        .await
        .expect("NOTIFY");

    let (got, gave_up) = tokio::time::timeout(HANG_GUARD, writer)
        .await
        .expect("the writer's wait ends")
        .expect("writer task");
    assert!(!got, "a reader of the other process holds the name");
    let admitted = tokio::time::timeout(Duration::from_secs(5), reader)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the reader is still asleep 5 s after the writer in front of it gave up (the old \
                 writer's TTL was 30 s)"
            )
        })
        .expect("reader task")
        .expect("only readers hold the name: the reader gets in");
    eprintln!(
        "the reader got in {:?} after the writer gave up",
        gave_up.elapsed()
    );
    drop((admitted, other_reader));
}

/// What the row of `key` in `table` says of its writer: `(token, holder,
/// whether its lease lasts now)`.
async fn writer_columns(
    admin: &tokio_postgres::Client,
    table: &str,
    key: &str,
) -> (String, String, bool) {
    let row = admin
        .query_one(
            &format!(
                "SELECT token, holder, expires_at > clock_timestamp() FROM {table} WHERE name = $1"
            ),
            &[&key],
        )
        .await
        .expect("the name's row");
    (row.get(0), row.get(1), row.get(2))
}

/// A reader let in after a writer's lease ran out takes the row with the
/// writer's columns cleared, as the memory store does: a late release or
/// renewal of that writer, whose statement read the clock while its lease
/// lasted, must find no lease of its own there, and leave the reader be.
/// Left in the row, the old writer's token and expiry passed such a call's
/// check: its release deleted the row with the reader in it, its renewal
/// gave the old writer a lease beside the reader.
///
/// The late call is made late on purpose, every run: the reader's store
/// runs on a pool of one connection, on which the test opens a transaction
/// and locks the name's row while the writer's lease lasts. The writer's
/// `release` (or `extend`) reads its clock then, and waits for the row.
/// Once the lease has run out, the reader is let in inside that
/// transaction (the row is its own already), and the commit hands the row,
/// reader and all, to the waiting call, which decides on it with the clock
/// it read before the lease ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_release_or_renewal_of_a_writer_whose_lease_ran_out_leaves_the_next_reader_alone() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let prefix = unique("late-writer");
    // A table of the test's own: nothing else runs in the transaction the
    // test holds open, nor waits on it.
    let leases = format!("late_writer_{:08x}", rand::random::<u32>());
    let table = format!("\"{}\".{leases}", postgres::schema());
    // Long enough to hold a call waiting for the row past the writer's TTL.
    let patient = postgres::config()
        .table(&leases)
        .timeout(Duration::from_secs(20));
    let writers = manager(&url, patient, &prefix).await;
    let one = deadpool_postgres::Manager::from_config(
        url.parse().expect("url"),
        tokio_postgres::NoTls,
        deadpool_postgres::ManagerConfig {
            recycling_method: deadpool_postgres::RecyclingMethod::Fast,
        },
    );
    let pool = deadpool_postgres::Pool::builder(one)
        .max_size(1)
        .build()
        .expect("pool");
    let config = postgres::config().table(&leases).sweep_every(LONG);
    let store = PostgresStore::from_pool(pool.clone(), &url, config)
        .await
        .expect("store over a pool of one");
    let readers = LockManager::new(store).with_prefix(&prefix);
    let admin = postgres::client(&url).await;
    let ttl = Duration::from_secs(2);
    for late in ["release", "extend"] {
        let writer = writers
            .lock(late, ttl)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let started = Instant::now();
        let (key, token) = (writer.key().to_owned(), writer.token().to_owned());
        writer.keep();

        let locked = {
            let held = pool.get().await.expect("the pool's connection");
            held.batch_execute("BEGIN").await.expect("BEGIN");
            held.execute(
                &format!("SELECT FROM {table} WHERE name = $1 FOR UPDATE"),
                &[&key],
            )
            .await
            .expect("lock the row");
            let pid: i32 = held
                .query_one("SELECT pg_backend_pid()", &[])
                .await
                .expect("pid")
                .get(0);
            pid
        };
        let call = tokio::spawn({
            let store = std::sync::Arc::clone(writers.store());
            let (key, token) = (key.clone(), token.clone());
            async move {
                match late {
                    "release" => store.release(&key, &token).await,
                    _ => store.extend(&key, &token, LONG).await,
                }
            }
        });
        let waiting = async {
            loop {
                let row = admin
                    .query_one(
                        "SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
                        &[&locked],
                    )
                    .await
                    .expect("pg_stat_activity");
                if row.get::<_, i64>(0) > 0 {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(HANG_GUARD, waiting)
            .await
            .expect("the late call waits for the row");
        let (_, _, lasting) = writer_columns(&admin, &table, &key).await;
        assert!(
            lasting,
            "{late}: the late call read its clock while the writer's lease lasted (on a machine \
             this slow, the test needs a longer TTL)"
        );

        tokio::time::sleep_until(started + ttl + Duration::from_millis(100)).await;
        let (_, _, lasting) = writer_columns(&admin, &table, &key).await;
        assert!(!lasting, "{late}: the writer's lease ran out");
        let reader = readers
            .lock(late, LONG)
            .read()
            .acquire()
            .await
            .expect("acquire")
            .expect("the writer's lease ran out: the reader gets in");
        pool.get()
            .await
            .expect("the pool's connection")
            .batch_execute("COMMIT")
            .await
            .expect("COMMIT");

        let answered = tokio::time::timeout(HANG_GUARD, call)
            .await
            .expect("the late call is answered once the row is free")
            .expect("call task")
            .expect("the call");
        assert!(
            !answered,
            "the writer's late {late} found no lease of its own: its lease had run out and a \
             reader holds the name"
        );
        assert!(
            reader.is_still_held().await.expect("check"),
            "{late}: the reader still holds the name"
        );
        let holder = readers
            .lock(late, LONG)
            .holder()
            .await
            .expect("holder")
            .expect("the reader holds the name");
        assert!(
            holder.is_reader() && holder.token() == reader.token(),
            "{late}: the holder is the reader, not the old writer: {holder:?}"
        );
        let (token_left, holder_left, lasting) = writer_columns(&admin, &table, &key).await;
        assert!(
            token_left.is_empty() && holder_left.is_empty() && !lasting,
            "{late}: the reader's row keeps no writer: token {token_left:?}, holder \
             {holder_left:?}, a lease that lasts: {lasting}"
        );
        assert!(reader.release().await.expect("release"));
    }
}
