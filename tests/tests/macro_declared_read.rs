//! `#[locked(read)]` in the catalogue, and `registry::verify()` on it: a
//! reader on a store that keeps no readers is reported at boot, a reader on
//! a store that keeps them is not.
//!
//! This file is its own test binary, so the declarations below are all the
//! binary has, and the assertions can be exact.

use std::time::Duration;

use lock_core::registry::{self, Problem};
use lock_core::store::{AcquireRequest, Attempt, BoxFuture};
use lock_core::{Error, Holder, LockManager, LockStore, MemoryStore, Result, locked};

/// The memory store, saying whether it keeps readers as told: `verify`
/// asks a store no more than `read_mode`, so the answer is the one thing
/// these tests vary.
struct ReadMode(MemoryStore, bool);

impl LockStore for ReadMode {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        self.0.acquire(request)
    }
    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        self.0.release(key, token)
    }
    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        self.0.extend(key, token, ttl)
    }
    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        self.0.force_release(key)
    }
    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        self.0.holder(key)
    }
    fn is_shared(&self) -> bool {
        self.0.is_shared()
    }
    fn max_ttl(&self) -> Duration {
        self.0.max_ttl()
    }
    fn read_mode(&self) -> bool {
        self.1
    }
}

#[locked(
    name = "catalog:{id}",
    ttl = "30s",
    wait = "1s",
    read,
    manager = "read-tests-no-readers"
)]
async fn show_catalog(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[locked(
    name = "catalog:{id}",
    ttl = "30s",
    read,
    manager = "read-tests-readers"
)]
async fn count_catalog(id: u64) -> Result<u64, Error> {
    Ok(id)
}

#[locked(name = "catalog:{id}", ttl = "10m", manager = "read-tests-no-readers")]
async fn rebuild_catalog(id: u64) -> Result<u64, Error> {
    Ok(id)
}

// One test installs the managers, as a service does once at boot; the
// checks that follow read the same registry.
#[tokio::test]
async fn verify_reports_a_reader_only_where_its_store_keeps_no_readers() {
    registry::install_named(
        "read-tests-no-readers",
        LockManager::new(ReadMode(MemoryStore::new(), false)),
    )
    .expect("installed once, by this test only");
    registry::install_named(
        "read-tests-readers",
        LockManager::new(ReadMode(MemoryStore::new(), true)),
    )
    .expect("installed once, by this test only");

    // The catalogue is where operators and `verify` learn the mode: each
    // function's options must say what its attribute said.
    let mode = |function: &str| {
        registry::declared()
            .into_iter()
            .find(|lock| lock.function().ends_with(function))
            .unwrap_or_else(|| panic!("{function} is declared"))
            .options()
            .read
    };
    assert!(mode("::show_catalog"), "show_catalog reads");
    assert!(mode("::count_catalog"), "count_catalog reads");
    assert!(!mode("::rebuild_catalog"), "rebuild_catalog writes");

    // Only the reader on the store without readers would fail each call:
    // the writer on that store, and the reader on a store that keeps
    // readers, are no problem.
    let problems = registry::verify().expect_err("one reader has no readers' store");
    assert_eq!(problems.len(), 1, "{problems}");
    let Some(Problem::ReadUnsupported { lock }) = problems.iter().next() else {
        panic!("the reader is reported as such: {problems}");
    };
    assert!(
        lock.function().ends_with("::show_catalog"),
        "the reader on the store without readers: {problems}"
    );
    let text = problems.to_string();
    assert!(
        text.contains("`read-tests-no-readers`") && text.contains("drop `read`"),
        "names the manager and the fix: {text}"
    );

    // What verify predicts is what a call gets.
    assert!(
        matches!(show_catalog(1).await, Err(Error::ReadUnsupported { .. })),
        "the reported reader fails its call"
    );
    assert_eq!(
        rebuild_catalog(1).await.expect("a writer needs no readers"),
        Some(1),
        "the writer on the same store runs"
    );
    // The other reader is not run: its store only says it keeps readers.
    let _ = count_catalog;
}
