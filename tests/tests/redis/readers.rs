//! A reader's lease on Redis, checked without walking the keyspace: the
//! check reads the name's lease key and its readers, and no `SCAN` reaches
//! the server, however many keys share the name's prefix.
//!
//! On a server of the test's own, so that `INFO commandstats` counts this
//! test's commands and no other's.

use std::time::Duration;

use lock_core::{LockManager, RedisStore};
use lock_tests::harness::{self, RedisServer};

/// A TTL no test outlives.
const LONG: Duration = Duration::from_secs(60);

/// How many `SCAN` commands the server on `port` has run since it started
/// (`INFO commandstats` lists a command once it has run).
fn scans(port: u16) -> u64 {
    let stats = harness::command(port, &["INFO", "commandstats"]).expect("INFO commandstats");
    stats
        .lines()
        .find_map(|line| line.strip_prefix("cmdstat_scan:"))
        .and_then(|fields| {
            fields
                .split(',')
                .find_map(|field| field.strip_prefix("calls="))
        })
        .map_or(0, |calls| calls.trim().parse().expect("a count of calls"))
}

/// A reader of `a` beside a writer of `ab` and readers of `a:b` and `a*`
/// (keys a `SCAN` for `a`'s prefix would match, `*` the pattern's own
/// wildcard): checking `a`'s reader, before and after its release, issues
/// no `SCAN`, and says what holds. A check that walked the keyspace would
/// cost every Redis of every user a full walk per call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checking_a_reader_issues_no_scan_and_sees_only_its_own_name() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = RedisStore::connect(&server.url()).await.expect("connect");
    let locks = LockManager::new(store).with_prefix("readers:");
    let read = |name: &str| locks.lock(name, LONG).read();
    let reader = read("a").acquire().await.expect("acquire").expect("free");
    let writer = locks
        .lock("ab", LONG)
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let mut around = Vec::new();
    for name in ["a:b", "a*"] {
        around.push(read(name).acquire().await.expect("acquire").expect("free"));
    }
    let before = scans(server.port());
    assert!(
        reader.is_still_held().await.expect("check"),
        "the reader holds its name"
    );
    assert!(
        locks
            .store()
            .release(reader.key(), reader.token())
            .await
            .expect("release"),
        "the reader's lease is released"
    );
    assert!(
        !reader.is_still_held().await.expect("check"),
        "a released reader is no longer held, though `ab`, `a:b` and `a*` are"
    );
    for guard in around.iter().chain([&writer]) {
        assert!(
            guard.is_still_held().await.expect("check"),
            "{} is still held",
            guard.key()
        );
    }
    let scanned = scans(server.port()) - before;
    assert_eq!(
        scanned, 0,
        "checking whether five leases are held ran {scanned} SCANs on the server"
    );
    // Released already: nothing for the guard to give back.
    reader.keep();
    assert!(writer.release().await.expect("release"));
    for guard in around {
        assert!(guard.release().await.expect("release"));
    }
}
