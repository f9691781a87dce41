//! `PostgresStore` on a real PostgreSQL: what the contract suite cannot show
//! from inside one process — other processes, a killed holder, fencing
//! across processes and restarts, a waiter elsewhere woken by the release,
//! connections terminated by the server, and the table's size.
//!
//! Time bounds are hang guards unless the bound is the behaviour under test.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lock_core::{Error, LockManager, PostgresConfig, PostgresStore};
use lock_test_kit::Instrumented;
use lock_tests::children::{self, Children, Lines, read_line, reports};
use lock_tests::postgres;
use tokio::time::Instant;

const LONG: Duration = Duration::from_secs(60);
const HANG_GUARD: Duration = Duration::from_secs(60);

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

fn child(args: &[&str]) -> std::process::Child {
    children::spawn_with(
        env!("CARGO_BIN_EXE_lock-child"),
        args,
        &[("LOCK_CHILD_PG_SCHEMA", postgres::schema())],
    )
}

async fn manager(url: &str, prefix: &str) -> LockManager {
    let store = PostgresStore::connect_with(url, postgres::config())
        .await
        .expect("connect");
    LockManager::new(store).with_prefix(prefix)
}

/// The table this process's stores use.
fn table() -> String {
    format!("\"{}\".lock_leases", postgres::schema())
}

/// 4 processes x 8 tasks x 25 read-yield-write increments of a counter in a
/// file, each under one lock in PostgreSQL: any overlap loses an update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_contending_for_one_lock_lose_no_update() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    // The table exists before the children race to create it.
    manager(&url, "warm:").await;
    let total = children::file_increments_across_processes(
        env!("CARGO_BIN_EXE_lock-child"),
        &url,
        &unique("contend"),
        &[("LOCK_CHILD_PG_SCHEMA", postgres::schema())],
        (4, 8, 25),
        30_000,
    );
    assert_eq!(total, 800, "no update lost across 4 processes");
}

/// Fencing tokens 1..=N, strictly increasing in acquisition order, across 4
/// processes taking one fenced lock 250 times each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_run_1_to_n_in_order_across_4_processes() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    manager(&url, "warm:").await;
    let prefix = unique("fence");
    let dir = std::env::temp_dir().join(format!("lock-tests-{}", prefix.trim_end_matches(':')));
    std::fs::create_dir_all(&dir).expect("dir");
    let log = dir.join("fences");
    let path = log.to_string_lossy().into_owned();
    let mut children = Children(
        (0..4)
            .map(|_| child(&["fence-file", &url, &prefix, "fenced", &path, "250"]))
            .collect(),
    );
    for line in reports(&mut children, Duration::from_secs(180)) {
        assert_eq!(line, "done 250");
    }
    let fences: Vec<u64> = std::fs::read_to_string(&log)
        .expect("fence log")
        .lines()
        .map(|line| line.parse().expect("a token"))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    let expected: Vec<u64> = (1..=1000).collect();
    assert_eq!(fences, expected, "tokens 1..=1000, in acquisition order");
}

/// Fencing tokens survive a release, an expiry and a new store (a restart
/// of the application): the counter lives in the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_tokens_survive_release_expiry_and_a_new_store() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let prefix = unique("fence-survives");
    let locks = manager(&url, &prefix).await;
    let lock = locks.lock("job", LONG).fenced();
    let first = lock.acquire().await.expect("acquire").expect("free");
    let f1 = first.fence().expect("fenced");
    first.release().await.expect("release");
    let second = lock.acquire().await.expect("acquire").expect("free");
    let f2 = second.fence().expect("fenced");
    assert!(f2 > f1, "after a release: {f2} > {f1}");
    second.release().await.expect("release");
    let short = locks.lock("job", Duration::from_millis(200)).fenced();
    let kept = short.acquire().await.expect("acquire").expect("free");
    let f3 = kept.fence().expect("fenced");
    kept.keep();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(f3 > f2, "{f3} > {f2}");
    let restarted = manager(&url, &prefix).await;
    let after = restarted
        .lock("job", LONG)
        .fenced()
        .acquire()
        .await
        .expect("acquire")
        .expect("expired, so free");
    let f4 = after.fence().expect("fenced");
    assert!(f4 > f3, "after an expiry and a new store: {f4} > {f3}");
}

/// Two processes: while one holds `reports:acme`, the other gets `None`;
/// once the holder releases, the other (now waiting) gets it within
/// milliseconds, woken by the release, not by the 30 s TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_in_another_process_gets_the_lock_milliseconds_after_the_release() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let prefix = unique("handoff");
    let locks = manager(&url, &prefix).await;
    let held = locks
        .lock("reports:acme", Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let mut waiter = Children(vec![child(&["probe-wait", &url, &prefix, "reports:acme"])]);
    let lines = Lines::of(&mut waiter.0[0]);
    assert_eq!(lines.next(HANG_GUARD), "none", "held elsewhere: None");
    // Long enough for the child to be waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released_at = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_micros();
    held.release().await.expect("release");
    let line = lines.next(HANG_GUARD);
    let got_at: u128 = line
        .strip_prefix("got ")
        .and_then(|at| at.parse().ok())
        .unwrap_or_else(|| panic!("the child said {line:?}"));
    let handoff = Duration::from_micros(
        u64::try_from(got_at.saturating_sub(released_at)).unwrap_or(u64::MAX),
    );
    eprintln!("cross-process handoff on PostgreSQL: {handoff:?}");
    assert!(
        handoff < Duration::from_secs(2),
        "woken by the release, not the 30 s TTL: {handoff:?}"
    );
    let status = waiter.0[0].wait().expect("child exit");
    assert!(status.success(), "the child exited cleanly");
}

/// A holder killed with SIGKILL never releases: its lease still ends at its
/// TTL, on the database's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_killed_with_sigkill_frees_the_lock_once_its_ttl_passes() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    manager(&url, "warm:").await;
    let prefix = unique("killed");
    let mut holder = Children(vec![child(&["hold", &url, &prefix, "job", "1500"])]);
    assert_eq!(read_line(&mut holder.0[0], HANG_GUARD), "held");
    holder.0[0].kill().expect("SIGKILL");
    let _ = holder.0[0].wait();
    let killed_at = Instant::now();
    let locks = manager(&url, &prefix).await;
    assert!(
        locks.lock("job", LONG).is_held().await.expect("is_held"),
        "still held right after the holder died"
    );
    let got = tokio::time::timeout(
        HANG_GUARD,
        locks
            .lock("job", LONG)
            .wait_for(Duration::from_secs(30))
            .acquire(),
    )
    .await
    .expect("the waiter gets it once the TTL passes")
    .expect("acquire");
    assert!(got.is_some(), "free after the dead holder's TTL");
    assert!(
        killed_at.elapsed() < Duration::from_secs(3),
        "a 1.5 s lease ends on time: {:?}",
        killed_at.elapsed()
    );
}

/// The server terminates every connection of a store (an administrator's
/// `pg_terminate_backend`, a failover): calls may fail for a moment, then
/// the same store works again, and its LISTEN connection listens again and
/// wakes its waiters once, so a waiter still hears the next release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_connections_give_errors_then_the_same_store_recovers_and_listens_again() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let name = format!("lock_tests_terminated_{:08x}", rand::random::<u32>());
    let separator = if url.contains('?') { '&' } else { '?' };
    let tagged = format!("{url}{separator}application_name={name}");
    let prefix = unique("terminated");
    let store = PostgresStore::connect_with(&tagged, postgres::config())
        .await
        .expect("connect");
    let counted = Instrumented::new(Arc::new(store));
    let waiting = LockManager::new(counted.clone()).with_prefix(prefix.clone());
    let other = manager(&url, &prefix).await;
    let held = other
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
    let before = counted.acquires();
    let admin = postgres::client(&url).await;
    let terminated = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
            &[&name],
        )
        .await
        .expect("terminate");
    assert!(!terminated.is_empty(), "the store's connections were found");
    // The LISTEN connection comes back and wakes the waiter once, in case
    // a release went unheard.
    let woke = tokio::time::timeout(HANG_GUARD, async {
        while counted.acquires() == before {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        woke.is_ok(),
        "the waiter was woken after the LISTEN came back"
    );
    // Calls work again on the same store (a broken pooled connection may
    // fail one call first).
    let recovered = tokio::time::timeout(HANG_GUARD, async {
        loop {
            if waiting.lock("other", LONG).is_held().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(recovered.is_ok(), "the same store recovers");
    let released_at = Instant::now();
    held.release().await.expect("release");
    let got = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .expect("woken by the release")
        .expect("task ran")
        .expect("acquire");
    assert!(got.is_some(), "the waiter got the lock");
    assert!(
        released_at.elapsed() < Duration::from_secs(10),
        "by the release's NOTIFY on the new LISTEN connection, not the 60 s TTL: {:?}",
        released_at.elapsed()
    );
    assert!(
        counted.acquires() - before <= 4,
        "woken once, not in a loop: {} attempts",
        counted.acquires() - before
    );
}

/// The table stays small: released unfenced names leave no row, and rows
/// that holders left behind are swept once expired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_names_leave_no_row_and_abandoned_ones_are_swept() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let prefix = unique("rows");
    let store =
        PostgresStore::connect_with(&url, postgres::config().sweep_every(Duration::from_secs(1)))
            .await
            .expect("connect");
    let locks = LockManager::new(store).with_prefix(prefix.clone());
    for i in 0..2000 {
        let guard = locks
            .lock(format!("order:{i}"), LONG)
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        guard.release().await.expect("release");
    }
    // Long enough to outlast making them all on a loaded machine, short
    // enough for the sweep to be watched.
    for i in 0..200 {
        locks
            .lock(format!("kept:{i}"), Duration::from_secs(3))
            .acquire()
            .await
            .expect("acquire")
            .expect("free")
            .keep();
    }
    let admin = postgres::client(&url).await;
    let count = |pattern: String| {
        let admin = &admin;
        async move {
            let row = admin
                .query_one(
                    &format!("SELECT count(*) FROM {} WHERE name LIKE $1", table()),
                    &[&pattern],
                )
                .await
                .expect("count");
            row.get::<_, i64>(0)
        }
    };
    assert_eq!(
        count(format!("{prefix}order:%")).await,
        0,
        "2,000 released names leave no row"
    );
    assert_eq!(
        count(format!("{prefix}kept:%")).await,
        200,
        "kept claims stand"
    );
    let swept = tokio::time::timeout(HANG_GUARD, async {
        while count(format!("{prefix}kept:%")).await > 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(swept.is_ok(), "expired abandoned rows are swept");
}

/// A PostgreSQL store is shared, fences, and never shows the password; a
/// table name that is not a plain identifier is refused, not injected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_store_is_shared_fences_hides_the_password_and_refuses_bad_names() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let store = PostgresStore::connect_with(&url, postgres::config())
        .await
        .expect("connect");
    assert!(lock_core::LockStore::is_shared(&store), "shared");
    assert!(lock_core::LockStore::fencing(&store), "fencing");
    let shown = format!("{store:?}");
    assert!(shown.contains("127.0.0.1"), "Debug shows the host: {shown}");
    let secret = PostgresStore::connect("postgres://user:hunter2@127.0.0.1:1/db").await;
    let message = secret
        .expect_err("nothing listens on port 1")
        .chain()
        .to_string();
    assert!(!message.contains("hunter2"), "never shown: {message}");
    let injected =
        PostgresStore::connect_with(&url, PostgresConfig::new().table("leases; DROP TABLE x"))
            .await;
    assert!(
        matches!(&injected, Err(Error::InvalidConfig { .. })),
        "a bad table name is refused, as a configuration error: {:?}",
        injected.map(drop)
    );
}

/// The store's `Debug` (and its manager's) ends up in logs: a password
/// given in the URL, holding what a URL treats specially, is never in it.
/// The server takes the connection whatever the password, as the test
/// server trusts its local clients; a URL that carries a password of its
/// own is left as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_url_is_never_in_the_stores_debug_output() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        panic!("POSTGRES_URL is a URL");
    };
    let Some((user, at)) = rest.split_once('@') else {
        return;
    };
    if user.contains(':') {
        return;
    }
    let with_password = format!("{scheme}://{user}:Zorro1@Quill2?Tiger3,Yak4@{at}");
    let store = match PostgresStore::connect_with(&with_password, postgres::config()).await {
        Ok(store) => store,
        Err(error) => {
            let text = format!("{}\n{error:?}", error.chain());
            for word in ["Zorro1", "Quill2", "Tiger3", "Yak4"] {
                assert!(
                    !text.contains(word),
                    "a piece of the password in the error: {text}"
                );
            }
            eprintln!("the server checks passwords; Debug not tried: {text}");
            return;
        }
    };
    let shown = format!("{store:?}\n{:?}", LockManager::new(store.clone()));
    for word in ["Zorro1", "Quill2", "Tiger3", "Yak4"] {
        assert!(
            !shown.contains(word),
            "a piece of the password in Debug: {shown}"
        );
    }
    assert!(
        shown.contains("127.0.0.1") || shown.contains("localhost"),
        "where it connects: {shown}"
    );
}

/// An application's own pool carries the store's statements (TLS, pool
/// settings and all), with a LISTEN connection of the store's own beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_over_the_applications_own_pool_locks_and_wakes() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let manager = deadpool_postgres::Manager::new(url.parse().expect("url"), tokio_postgres::NoTls);
    let pool = deadpool_postgres::Pool::builder(manager)
        .max_size(2)
        .build()
        .expect("pool");
    let store = PostgresStore::from_pool(pool.clone(), &url, postgres::config())
        .await
        .expect("store over the pool");
    let locks = LockManager::new(store).with_prefix(unique("app-pool"));
    let held = locks
        .lock("job", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiter = {
        let lock = locks.lock("job", LONG).wait_for(LONG);
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    held.release().await.expect("release");
    let got = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .expect("woken by the release")
        .expect("task ran")
        .expect("acquire");
    assert!(got.is_some(), "the waiter got it");
    assert!(
        pool.status().size >= 1,
        "the statements ran on the app's pool"
    );
}

/// `url` with its host and port replaced by `addr` (a proxy in front of
/// the server), keeping the user, password and database.
fn through(url: &str, addr: std::net::SocketAddr) -> tokio_postgres::Config {
    let direct: tokio_postgres::Config = url.parse().expect("url");
    let mut proxied = tokio_postgres::Config::new();
    proxied.host(addr.ip().to_string()).port(addr.port());
    if let Some(user) = direct.get_user() {
        proxied.user(user);
    }
    if let Some(password) = direct.get_password() {
        proxied.password(password);
    }
    if let Some(dbname) = direct.get_dbname() {
        proxied.dbname(dbname);
    }
    proxied
}

/// `host:port` of the server `url` points at.
fn upstream(url: &str) -> String {
    let config: tokio_postgres::Config = url.parse().expect("url");
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".to_owned(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// A waiter whose nap ended on its timer starts a new round: it registers
/// a new interest in the key and sends its statement. A release that lands
/// while that statement is on its way is announced to the process, which
/// wakes the oldest interest, the one from the round before. That interest
/// must hand the wake-up on rather than swallow it, or the new round's
/// interest is never woken and the waiter sleeps for the holder's whole
/// remaining TTL (here about 26 s) after the lock went free.
///
/// Timeline: the waiter's statements take 2 s to come back (a proxy holds
/// the replies); its LISTEN connection is direct, so it hears the release
/// at once.
///
/// ```text
/// t=0  holder takes the lock for 3 s; waiter's first try: held, ~3 s left
/// t=1  holder extends to 30 s
/// t=5  waiter's nap ends: second try sent (reply held until t=7)
/// t=6  holder releases: NOTIFY reaches the waiter's process
/// t=7  second try's reply: held (it ran at t=5); the waiter must try again
/// ```
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_during_a_retry_after_a_timed_out_nap_still_wakes_the_waiter() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let prefix = unique("retry-wake");
    let holder = manager(&url, &prefix).await;
    let proxy = lock_tests::proxy::Proxy::start(&upstream(&url))
        .await
        .expect("proxy");
    let pool = deadpool_postgres::Pool::builder(deadpool_postgres::Manager::new(
        through(&url, proxy.addr()),
        tokio_postgres::NoTls,
    ))
    .max_size(1)
    .build()
    .expect("pool");
    let store = PostgresStore::from_pool(
        pool,
        &url,
        postgres::config().timeout(Duration::from_secs(20)),
    )
    .await
    .expect("store over the proxied pool");
    let waiting = LockManager::new(store).with_prefix(prefix.clone());
    // The pooled connection and its prepared statements exist before the
    // replies are held back, so each later call is one delayed round trip.
    waiting
        .lock("warm-up", LONG)
        .wait_for(LONG)
        .acquire()
        .await
        .expect("warm-up acquire")
        .expect("free")
        .release()
        .await
        .expect("warm-up release");
    proxy.set_delay(Duration::from_secs(2));

    let started = Instant::now();
    let held = holder
        .lock("report", Duration::from_secs(3))
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let waiter = {
        let lock = waiting.lock("report", LONG).wait_for(LONG);
        tokio::spawn(async move { lock.acquire().await })
    };
    tokio::time::sleep_until(started + Duration::from_secs(1)).await;
    assert!(
        held.extend(Duration::from_secs(30)).await.expect("extend"),
        "still ours at 1 s"
    );
    tokio::time::sleep_until(started + Duration::from_secs(6)).await;
    let token = held.token().to_owned();
    assert!(held.release().await.expect("release"), "released at 6 s");
    let released = Instant::now();
    let lock = holder.lock("report", LONG);
    let taken = loop {
        if let Some(now) = lock.holder().await.expect("holder") {
            assert_ne!(now.token(), token, "the released lease is gone");
            break released.elapsed();
        }
        assert!(
            released.elapsed() < Duration::from_secs(2),
            "nobody took the lock within 2 s of its release: the waiter slept \
             through the wake-up meant for its retry"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("the waiter held the lock {taken:?} after the release");
    let got = tokio::time::timeout(HANG_GUARD, waiter)
        .await
        .expect("the waiter returns")
        .expect("task ran")
        .expect("acquire");
    assert!(got.is_some(), "the waiter got the lock");
}

/// `timeout(Duration::MAX)` is how a user asks for no time bound: every
/// call must work, not panic adding it to the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_no_time_bound_works_instead_of_panicking() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    let config = postgres::config().timeout(Duration::MAX);
    let store = PostgresStore::connect_with(&url, config)
        .await
        .expect("connect with no time bound");
    lock_test_kit::contract::every_call_works_without_a_time_bound(LockManager::new(store)).await;
}

/// The read side across 4 processes, as on Redis: 2 writers and 4 readers
/// in each, 25 times each; no read may find a write under way, and no
/// update may be lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_see_a_write_under_way_across_4_processes() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    manager(&url, "warm:").await;
    let run = children::read_write_across_processes(
        env!("CARGO_BIN_EXE_lock-child"),
        &url,
        &unique("read-write"),
        &[("LOCK_CHILD_PG_SCHEMA", postgres::schema())],
        (4, 2, 4, 25),
        30_000,
    );
    eprintln!("PostgreSQL, 4 processes: {run:?}");
    assert_eq!(run.torn, 0, "no read saw a write under way: {run:?}");
    assert_eq!(run.writes, 200, "every write ran: {run:?}");
    assert_eq!(run.reads, 400, "every read ran: {run:?}");
    assert_eq!(run.total, 200, "no update lost: {run:?}");
}

/// A guard dropped as `#[tokio::main]` returns (`let _guard = ...` in a cron
/// binary's `main`) is given back before the process exits, under both
/// flavors of runtime: the next run must not find the lock held for the
/// rest of its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_as_tokio_main_returns_is_given_back_before_the_process_exits() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    children::main_returning_with_a_guard_gives_it_back(
        env!("CARGO_BIN_EXE_exit-child"),
        &url,
        &manager(&url, "").await,
        &[("LOCK_CHILD_PG_SCHEMA", postgres::schema())],
        HANG_GUARD,
    )
    .await;
}

/// Every record tokio-postgres logs, counted when it quotes a server's
/// NOTICE that a relation already exists.
struct Notices;

static NOTICES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl log::Log for Notices {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.args().to_string().contains("already exists") {
            NOTICES.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
    fn flush(&self) {}
}

/// A store connecting to a database whose tables exist says nothing about
/// them: the `CREATE ... IF NOT EXISTS` it runs made the server send a
/// NOTICE per relation ("relation \"lock_leases\" already exists,
/// skipping"), which tokio-postgres logs at INFO on every connect of every
/// process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_to_existing_tables_logs_no_notices() {
    let Some(url) = postgres::postgres_url() else {
        return;
    };
    static LOGGER: Notices = Notices;
    log::set_logger(&LOGGER).expect("the only logger of this binary");
    log::set_max_level(log::LevelFilter::Trace);
    let config = postgres::config().schema(format!("notices_{:08x}", rand::random::<u32>()));
    // The first connect creates the tables; the second finds them.
    drop(
        PostgresStore::connect_with(&url, config.clone())
            .await
            .expect("connect"),
    );
    let before = NOTICES.load(std::sync::atomic::Ordering::SeqCst);
    drop(
        PostgresStore::connect_with(&url, config)
            .await
            .expect("connect again"),
    );
    let after = NOTICES.load(std::sync::atomic::Ordering::SeqCst);
    assert_eq!(
        after - before,
        0,
        "a connect to tables that exist logs no \"already exists\" notices"
    );
}
