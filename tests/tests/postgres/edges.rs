//! `PostgresStore` at its edges, on a real PostgreSQL: statements blocked
//! behind another session's lock, connections whose `search_path` differs,
//! settings PostgreSQL would cut or refuse, a setup that fails on the
//! application's own pool, and names PostgreSQL's `text` cannot hold.
//!
//! Time bounds are hang guards unless the bound is the behaviour under test.

use std::time::Duration;

use lock_core::{Error, LockManager, PostgresConfig, PostgresStore};
use lock_tests::postgres;

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

/// A schema of this test process's own (dropped with the others once the
/// process is gone), so a test can shape its tables freely.
fn own_schema(what: &str) -> String {
    format!(
        "{}_{what}_{:08x}",
        postgres::schema(),
        rand::random::<u32>()
    )
}

/// A store on a schema of its own (the table lock must not hold up the
/// other tests) with a 500 ms timeout and statements sent whole (no
/// prepare first, so each blocked acquire is its INSERT itself, waiting on
/// the server), and a migration's session holding `LOCK TABLE` on its lease
/// table until [`TableLock::commit`].
struct TableLock {
    locks: LockManager,
    timeout: Duration,
    table: String,
    prefix: String,
    url: String,
    migration: tokio_postgres::Client,
}

impl TableLock {
    async fn start(url: &str, what: &str) -> TableLock {
        let timeout = Duration::from_millis(500);
        let schema = own_schema(what);
        let config = PostgresConfig::new()
            .schema(schema.clone())
            .timeout(timeout)
            .prepared_statements(false);
        let store = PostgresStore::connect_with(url, config)
            .await
            .expect("connect");
        let prefix = unique(what);
        let table = format!("\"{schema}\".lock_leases");
        let migration = postgres::client(url).await;
        migration
            .batch_execute(&format!(
                "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
            ))
            .await
            .expect("BEGIN; LOCK TABLE");
        TableLock {
            locks: LockManager::new(store).with_prefix(prefix.clone()),
            timeout,
            table,
            prefix,
            url: url.to_owned(),
            migration,
        }
    }

    /// The migration ends: every statement queued behind it may run.
    async fn commit(&self) {
        self.migration
            .batch_execute("COMMIT")
            .await
            .expect("COMMIT");
    }

    /// How many names under `<prefix><start>` ever took a fencing token: a
    /// fenced acquire that wins counts its name's fence up in the same
    /// statement.
    async fn fenced(&self, start: &str) -> i64 {
        postgres::client(&self.url)
            .await
            .query_one(
                &format!(
                    "SELECT count(*) FROM {}_fences WHERE starts_with(name, $1)",
                    self.table
                ),
                &[&format!("{}{start}", self.prefix)],
            )
            .await
            .expect("count")
            .get(0)
    }
}

/// A migration that holds `LOCK TABLE` on the lease table blocks every
/// statement behind it. Calls that time out meanwhile must not leave their
/// statements queued on the server or on a pooled connection: once the lock
/// goes, those statements would write leases nobody holds (the callers got
/// errors, so no guard exists for them), and every later call handed that
/// connection would wait behind them, for names that have nothing to do
/// with the migration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_cut_off_behind_a_table_lock_leave_no_lease_and_no_busy_connection() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let held = TableLock::start(&url, "table_lock").await;
    let locks = &held.locks;
    let blocked = (0..8).map(|n| {
        let lock = locks.lock(format!("blocked-{n}"), LONG).fenced();
        async move { lock.acquire().await }
    });
    let results = tokio::time::timeout(HANG_GUARD, futures_join(blocked))
        .await
        .expect("every acquire returns");
    for result in &results {
        assert!(
            matches!(result, Err(Error::Store { .. })),
            "an acquire behind the table lock times out: {result:?}"
        );
    }
    // Let the acquires' give-backs run into the lock too, as they would.
    tokio::time::sleep(held.timeout * 2).await;
    held.commit().await;

    // Every later call gets a connection that is free: none waits for a
    // statement left behind, so each answers well inside its timeout.
    for n in 0..8 {
        let lock = locks.lock(format!("after-{n}"), LONG);
        let guard = lock
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire {n} after the COMMIT: {}", e.chain()))
            .expect("free");
        guard.release().await.expect("release");
    }
    // Whatever the timed-out statements did has settled by now: none of
    // them holds a lease (no guard exists for any).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left: i64 = postgres::client(&url)
        .await
        .query_one(
            &format!(
                "SELECT count(*) FROM {} WHERE starts_with(name, $1) AND expires_at > clock_timestamp()",
                held.table
            ),
            &[&format!("{}blocked-", held.prefix)],
        )
        .await
        .expect("count")
        .get(0);
    assert_eq!(
        left, 0,
        "no lease is held for the acquires that timed out: nobody holds them"
    );
    // No counter means no timed-out acquire ever took its lease, not even
    // for a moment after the COMMIT.
    assert_eq!(
        held.fenced("blocked-").await,
        0,
        "no acquire cut off at its deadline ran once the table lock was gone"
    );
}

/// Runs `futures` concurrently and collects their outputs in order.
async fn futures_join<F>(futures: impl Iterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let tasks: Vec<_> = futures.map(tokio::spawn).collect();
    let mut outputs = Vec::with_capacity(tasks.len());
    for task in tasks {
        outputs.push(task.await.expect("task ran"));
    }
    outputs
}

/// One statement blocked on one name's row (another session holds it `FOR
/// UPDATE`) must not hold up calls for other names: the blocked call is cut
/// off at its deadline and its connection is not handed to the next call
/// while still busy with it. With one pooled connection, a connection
/// handed back busy makes the very next call, for an unrelated name, time
/// out too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_blocked_on_one_row_does_not_hold_up_calls_for_other_names() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let prefix = unique("row-lock");
    let holder = LockManager::new(
        PostgresStore::connect_with(&url, postgres::config())
            .await
            .expect("connect"),
    )
    .with_prefix(prefix.clone());
    let held = holder
        .lock("busy", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let store = PostgresStore::connect_with(
        &url,
        postgres::config()
            .pool_size(1)
            .timeout(Duration::from_millis(500)),
    )
    .await
    .expect("connect");
    let locks = LockManager::new(store).with_prefix(prefix.clone());

    let mut other = postgres::client(&url).await;
    let table = format!("\"{}\".lock_leases", postgres::schema());
    let transaction = other.transaction().await.expect("BEGIN");
    let locked = transaction
        .query(
            &format!("SELECT 1 FROM {table} WHERE name = $1 FOR UPDATE"),
            &[&format!("{prefix}busy")],
        )
        .await
        .expect("SELECT ... FOR UPDATE");
    assert_eq!(locked.len(), 1, "the held name's row is locked");

    let blocked = tokio::time::timeout(HANG_GUARD, locks.lock("busy", LONG).acquire())
        .await
        .expect("returns");
    assert!(
        matches!(blocked, Err(Error::Store { .. })),
        "the acquire behind the row lock times out: {blocked:?}"
    );
    for n in 0..3 {
        let unrelated =
            tokio::time::timeout(HANG_GUARD, locks.lock(format!("free-{n}"), LONG).acquire())
                .await
                .expect("returns")
                .unwrap_or_else(|e| {
                    panic!(
                        "an acquire of an unrelated name while the row stays locked: {}",
                        e.chain()
                    )
                })
                .expect("free");
        unrelated.release().await.expect("release");
    }
    transaction.rollback().await.expect("ROLLBACK");
    held.release().await.expect("release");
}

/// A caller may drop an acquire before the store's own deadline (its own
/// `timeout`, a `select!` arm that lost). If the statement is blocked (a
/// migration's `LOCK TABLE`), it must still be cancelled once the call's
/// deadline passes, not left to run when the lock goes: it would take a
/// lease for an acquire nobody waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquires_their_callers_dropped_behind_a_table_lock_never_run() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let held = TableLock::start(&url, "dropped").await;
    let locks = &held.locks;
    for n in 0..4 {
        let lock = locks.lock(format!("dropped-{n}"), LONG).fenced();
        let cut = tokio::time::timeout(Duration::from_millis(100), lock.acquire()).await;
        assert!(
            cut.is_err(),
            "the caller drops the blocked acquire: {cut:?}"
        );
    }
    // Past the calls' deadlines, then the migration commits.
    tokio::time::sleep(held.timeout * 3).await;
    held.commit().await;

    let guard = tokio::time::timeout(HANG_GUARD, locks.lock("after", LONG).acquire())
        .await
        .expect("returns")
        .unwrap_or_else(|e| panic!("acquire after the COMMIT: {}", e.chain()))
        .expect("free");
    guard.release().await.expect("release");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        held.fenced("dropped-").await,
        0,
        "no acquire its caller dropped ran once the table lock was gone"
    );
}

/// Without `schema`, the table must be the same one for every pooled
/// connection, whatever each connection's `search_path` says (an
/// application pool that sets it per connection, PgBouncer in transaction
/// mode handing out server sessions of several clients). Otherwise
/// connections that resolve the bare table name differently lease one name
/// in two tables: two holders at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_with_different_search_paths_lease_a_name_in_one_table() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let schemas = [own_schema("path_a"), own_schema("path_b")];
    for schema in &schemas {
        // Each schema gets a lease table of its own.
        PostgresStore::connect_with(&url, PostgresConfig::new().schema(schema.clone()))
            .await
            .expect("create the tables in one schema");
    }
    let opened = Arc::new(AtomicUsize::new(0));
    let paths = schemas.clone();
    let pool = deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(
        url.parse().expect("url"),
        tokio_postgres::NoTls,
    ))
    .max_size(4)
    .post_create(deadpool_postgres::Hook::async_fn(move |client, _| {
        // Connections alternate between the two schemas.
        let path = paths[opened.fetch_add(1, Ordering::SeqCst) % 2].clone();
        Box::pin(async move {
            client
                .batch_execute(&format!("SET search_path TO \"{path}\""))
                .await
                .map_err(deadpool_postgres::HookError::Backend)
        })
    }))
    .build()
    .expect("pool");
    let store = PostgresStore::from_pool(pool.clone(), &url, PostgresConfig::new())
        .await
        .expect("store over the pool");
    let locks = LockManager::new(store).with_prefix(unique("search-path"));
    let tries = (0..16).map(|_| {
        let lock = locks.lock("one-name", LONG);
        async move { lock.acquire().await }
    });
    let tasks: Vec<_> = tries.map(tokio::spawn).collect();
    let mut winners = Vec::new();
    for task in tasks {
        let got = tokio::time::timeout(HANG_GUARD, task)
            .await
            .expect("returns")
            .expect("task ran")
            .expect("acquire");
        winners.extend(got);
    }
    assert!(
        pool.status().size >= 2,
        "both search paths were in use: {:?}",
        pool.status()
    );
    assert_eq!(
        winners.len(),
        1,
        "exactly one of 16 concurrent acquires of one name wins"
    );
}

/// PostgreSQL cuts a `LISTEN` channel name to 63 bytes but `pg_notify`
/// refuses a longer one, and that error rolls back the release's `DELETE`
/// exactly when someone waits. Such a channel must be refused when the
/// store is set up, saying the limit, not fail releases later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_channel_postgres_would_cut_is_refused_at_setup_and_the_longest_allowed_works() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let refused =
        PostgresStore::connect_with(&url, postgres::config().channel("c".repeat(64))).await;
    let message = match refused {
        Ok(_) => panic!("a 64-byte channel is refused"),
        Err(e) => e.chain().to_string(),
    };
    assert!(
        message.contains("63 bytes"),
        "the error says the limit: {message}"
    );
    for empty in ["", "a\0b"] {
        assert!(
            PostgresStore::connect_with(&url, postgres::config().channel(empty))
                .await
                .is_err(),
            "channel {empty:?} is refused"
        );
    }

    // The longest allowed channel carries a release to a waiter in another
    // store, and the release itself goes through.
    let channel = format!("c{:062}", rand::random::<u32>());
    assert_eq!(channel.len(), 63);
    let prefix = unique("channel");
    let stores = [(); 2]
        .map(|()| PostgresStore::connect_with(&url, postgres::config().channel(channel.clone())));
    let [holding, waiting] = stores;
    let holding = LockManager::new(holding.await.expect("connect")).with_prefix(prefix.clone());
    let waiting = LockManager::new(waiting.await.expect("connect")).with_prefix(prefix);
    let held = holding
        .lock("job", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiter = {
        let lock = waiting.lock("job", LONG).wait_for(LONG);
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        held.release().await.expect("release"),
        "the release went through"
    );
    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter is woken by the release, long before the 60 s TTL")
        .expect("task ran")
        .expect("acquire");
    assert!(got.is_some(), "the waiter got the lock");
}

/// `from_pool` runs its setup on a connection of the application's own
/// pool. When the setup fails, that connection goes back to the
/// application: it must not be inside an aborted transaction (every query
/// the application sends on it would fail) nor keep the setup's advisory
/// lock (every later store setup on the database would wait for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_setup_leaves_the_applications_pooled_connection_clean() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    // A view where the lease table should be: `CREATE TABLE IF NOT EXISTS`
    // skips it, and the index on it fails.
    let schema = own_schema("view");
    let admin = postgres::client(&url).await;
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA \"{schema}\"; CREATE VIEW \"{schema}\".lock_leases AS SELECT 'x'::text AS name"
        ))
        .await
        .expect("the conflicting view");
    let pool = deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(
        url.parse().expect("url"),
        tokio_postgres::NoTls,
    ))
    .max_size(1)
    .build()
    .expect("pool");
    let failed =
        PostgresStore::from_pool(pool.clone(), &url, PostgresConfig::new().schema(schema)).await;
    assert!(
        matches!(failed, Err(Error::Store { .. })),
        "the setup fails on the view: {:?}",
        failed.map(drop)
    );

    let client = pool.get().await.expect("the application's connection");
    let answer = client
        .query_one("SELECT 1::int4", &[])
        .await
        .map(|row| row.get::<_, i32>(0));
    assert_eq!(
        answer.as_ref().map_err(|e| e
            .as_db_error()
            .map_or_else(|| e.to_string(), |db| db.message().to_owned())),
        Ok(&1),
        "the application's connection answers queries (not in an aborted transaction)"
    );
    let advisory: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
            &[],
        )
        .await
        .expect("count advisory locks")
        .get(0);
    assert_eq!(advisory, 0, "the connection holds no advisory lock");
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .expect("backend pid")
        .get(0);
    let state: Option<String> = admin
        .query_one("SELECT state FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .expect("the connection's state")
        .get(0);
    assert_eq!(
        state.as_deref(),
        Some("idle"),
        "the application's connection is not left inside a transaction"
    );
}

/// Lock names may hold any text: a NUL byte (binary identifiers), or a
/// long name nothing compresses (a serialized key, a list of ids). Every
/// other store takes both; in PostgreSQL a `text` cannot hold a NUL and a
/// primary-key entry cannot exceed about 2.7 KB, so both must still lease
/// exclusively, be seen by `holder` and `list`, and release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_with_a_nul_byte_or_many_kilobytes_lease_exclusively_and_release() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let prefix = unique("odd-names");
    let store = || PostgresStore::connect_with(&url, postgres::config());
    let first = LockManager::new(store().await.expect("connect")).with_prefix(prefix.clone());
    let second = LockManager::new(store().await.expect("connect")).with_prefix(prefix.clone());
    let incompressible: String = (0..8000)
        .map(|_| char::from(b"0123456789abcdef"[usize::from(rand::random::<u8>() % 16)]))
        .collect();
    let names = [
        "job\0with-a-nul".to_owned(),
        "job\0with-a-nul-too".to_owned(),
        incompressible.clone(),
        format!("{incompressible}-2"),
    ];
    let mut guards = Vec::new();
    for name in &names {
        let shown = &name[..name.len().min(24)];
        let guard = first
            .lock(name.as_str(), LONG)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire {shown:?}: {}", e.chain()))
            .unwrap_or_else(|| panic!("{shown:?} is free"));
        assert!(
            second
                .lock(name.as_str(), LONG)
                .acquire()
                .await
                .expect("second acquire")
                .is_none(),
            "{shown:?} is held exclusively"
        );
        let holder = second
            .lock(name.as_str(), LONG)
            .holder()
            .await
            .expect("holder")
            .unwrap_or_else(|| panic!("{shown:?} has a holder"));
        assert_eq!(
            holder.token(),
            guard.token(),
            "{shown:?}: the holder is ours"
        );
        guards.push(guard);
    }
    let listed = second.list().await.expect("list");
    assert_eq!(
        listed.len(),
        names.len(),
        "one entry per held name: {:?}",
        listed.len()
    );
    for (name, guard) in names.iter().zip(guards) {
        let shown = &name[..name.len().min(24)];
        assert!(
            guard.release().await.expect("release"),
            "{shown:?} released"
        );
        let again = second
            .lock(name.as_str(), LONG)
            .acquire()
            .await
            .expect("acquire after the release")
            .unwrap_or_else(|| panic!("{shown:?} is free after the release"));
        again.release().await.expect("release");
    }
}

/// A pool of connections whose hook sets `search_path` to `schema`, as an
/// application's pool may, or as PgBouncer hands out a session another
/// client changed.
fn pool_on_path(url: &str, schema: String) -> deadpool_postgres::Pool {
    deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(
        url.parse().expect("url"),
        tokio_postgres::NoTls,
    ))
    .max_size(2)
    .post_create(deadpool_postgres::Hook::async_fn(move |client, _| {
        let path = schema.clone();
        Box::pin(async move {
            client
                .batch_execute(&format!("SET search_path TO \"{path}\""))
                .await
                .map_err(deadpool_postgres::HookError::Backend)
        })
    }))
    .build()
    .expect("pool")
}

/// Two processes whose connections were left on different `search_path`s
/// (each pool's hook, or a pooler's leftover session state) must still
/// lease a name in one table: the schema is resolved from the role's and
/// the connection's own settings, never from what a session was last SET
/// to. Before, each store pinned the schema its first connection happened
/// to be on, and both acquires of one name won.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_on_sessions_with_different_search_paths_share_one_table() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let schemas = [own_schema("session_a"), own_schema("session_b")];
    let table = format!("leases_{:08x}", rand::random::<u32>());
    let mut stores = Vec::new();
    for schema in &schemas {
        let admin = PostgresStore::connect_with(
            &url,
            PostgresConfig::new()
                .schema(schema.clone())
                .table(table.clone()),
        )
        .await
        .expect("a lease table in each schema");
        drop(admin);
        let pool = pool_on_path(&url, schema.clone());
        stores.push(
            PostgresStore::from_pool(pool, &url, PostgresConfig::new().table(table.clone()))
                .await
                .expect("a store over a pool on that search_path"),
        );
    }
    let prefix = unique("session-path");
    let mut winners = 0;
    let mut guards = Vec::new();
    for store in stores {
        let locks = LockManager::new(store).with_prefix(prefix.clone());
        if let Some(guard) = locks
            .lock("one-name", LONG)
            .acquire()
            .await
            .expect("acquire")
        {
            winners += 1;
            guards.push(guard);
        }
    }
    for guard in guards {
        guard.release().await.expect("release");
    }
    assert_eq!(
        winners, 1,
        "one name, one holder, whatever each session's search_path"
    );
}

/// `list` shows a lock kept under a hash by its row name. An operator
/// inspecting or freeing a stuck lock gives that name back; it must reach
/// the same lease, not be hashed again into another row (before, `holder`
/// said nobody held it, and `force_release` freed nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hashed_name_as_list_shows_it_inspects_and_frees_its_lease() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let store =
        PostgresStore::connect_with(&url, PostgresConfig::new().schema(own_schema("listed")))
            .await
            .expect("connect");
    let locks = LockManager::new(store).with_prefix(unique("listed"));
    let guard = locks
        .lock("job\0id", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let listed = locks.list().await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    let shown = listed[0].0.clone();
    let holder = locks
        .lock(&shown, LONG)
        .holder()
        .await
        .expect("holder")
        .expect("the name list showed is held");
    assert_eq!(holder.token(), guard.token(), "by the guard's lease");
    assert!(
        locks
            .lock(&shown, LONG)
            .force_release()
            .await
            .expect("force release"),
        "freed by the name list showed"
    );
    assert!(!guard.release().await.expect("release"), "it was freed");
}

/// A release from another process reaches this one only through NOTIFY,
/// which wakes one of its waiters; cut off before its next attempt is
/// answered, that waiter must pass the wake on to the other. (With the
/// holder in this process, the release also wakes a waiter at once, and
/// two wakes hide a lost one: the contract case alone cannot tell.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_cut_off_after_a_notified_release_passes_the_wake_on() {
    let (Some(holders), Some(waiters)) = (
        postgres::postgres_manager().await,
        postgres::postgres_manager().await,
    ) else {
        return;
    };
    lock_test_kit::contract::a_waiter_cut_off_after_a_release_from_elsewhere_passes_the_wake_on(
        holders, waiters,
    )
    .await;
}
