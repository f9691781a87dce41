//! Declared locks: every `#[locked]` function in a binary is listed by
//! `registry::declared()` and checked by `registry::verify()`.
//!
//! This file is its own test binary, so the declarations below are all the
//! binary has, and the assertions can be exact.

use std::time::Duration;

use lock_core::registry::{self, Problem};
use lock_core::{LockManager, locked};

#[locked(name = "declared:{tenant}", ttl = "10m", wait = "2s")]
async fn templated(tenant: &str) -> usize {
    tenant.len()
}

#[locked(
    name = "declared:nightly",
    ttl = "1h 30m",
    manager = "declared-tests-reports"
)]
async fn nightly_a() {}

#[locked(
    name = "declared:nightly",
    ttl = "2h",
    manager = "declared-tests-reports"
)]
async fn nightly_b() {}

#[locked(ttl = "250ms", manager = "declared-tests-missing")]
async fn unmanaged() {}

fn find(function: &str) -> &'static registry::DeclaredLock {
    registry::declared()
        .into_iter()
        .find(|lock| lock.function().ends_with(function))
        .unwrap_or_else(|| panic!("{function} is not declared"))
}

// `declared()` is how operators and boot checks see every lock the binary
// can take; each field must be what the attribute said.
#[test]
fn declared_lists_every_locked_function_with_its_settings() {
    let all: Vec<_> = registry::declared()
        .into_iter()
        .filter(|lock| lock.function().starts_with(concat!(module_path!(), "::")))
        .collect();
    assert_eq!(all.len(), 4, "four #[locked] functions here: {all:#?}");

    let lock = find("::templated");
    assert_eq!(lock.name(), "declared:{tenant}", "the template as written");
    assert_eq!(lock.literal_name(), None, "a template has no single name");
    assert_eq!(
        lock.function(),
        concat!(module_path!(), "::templated"),
        "path"
    );
    assert_eq!(lock.ttl(), Duration::from_secs(600), "ttl");
    assert_eq!(lock.wait(), Duration::from_secs(2), "wait");
    assert_eq!(lock.manager(), None, "default manager");
    assert!(
        lock.file().ends_with("macro_declared.rs"),
        "file: {}",
        lock.file()
    );
    assert!(lock.line() > 0, "line");

    let lock = find("::nightly_a");
    assert_eq!(lock.literal_name(), Some("declared:nightly"), "literal");
    assert_eq!(lock.ttl(), Duration::from_secs(5400), "1h 30m");
    assert_eq!(lock.wait(), Duration::ZERO, "no wait");
    assert_eq!(lock.manager(), Some("declared-tests-reports"), "manager");

    let lock = find("::unmanaged");
    assert_eq!(
        lock.name(),
        concat!(module_path!(), "::unmanaged"),
        "the default name is the function path"
    );
    assert_eq!(
        lock.literal_name(),
        Some(concat!(module_path!(), "::unmanaged")),
        "and it is a literal name"
    );
    assert_eq!(lock.ttl(), Duration::from_millis(250), "ttl");

    let lines: Vec<u32> = all.iter().map(|lock| lock.line()).collect();
    assert!(lines.is_sorted(), "ordered by file and line: {lines:?}");
}

// `verify()` must report every problem in one go, so one boot tells the
// operator everything to fix.
#[test]
fn verify_reports_missing_managers_and_conflicting_ttls_together() {
    registry::install_named("declared-tests-reports", LockManager::memory())
        .expect("installed once, by this test only");
    let problems = registry::verify().expect_err("two problems are declared above");
    assert_eq!(problems.len(), 2, "{problems}");
    let missing = problems
        .iter()
        .find(|problem| matches!(problem, Problem::ManagerNotInstalled { .. }))
        .expect("the missing manager is reported");
    assert!(
        missing.to_string().contains("declared-tests-missing")
            && missing.to_string().contains("::unmanaged"),
        "names the manager and the function: {missing}"
    );
    let conflict = problems
        .iter()
        .find(|problem| matches!(problem, Problem::ConflictingTtl { .. }))
        .expect("the ttl conflict is reported");
    let text = conflict.to_string();
    assert!(
        text.contains("declared:nightly") && text.contains("5400s") && text.contains("7200s"),
        "names the lock and both ttls: {text}"
    );
    assert!(
        problems.to_string().starts_with("2 problem(s)"),
        "the error lists them all: {problems}"
    );
}

// Keep the functions used, and prove they are ordinary locked functions.
#[tokio::test]
async fn declared_functions_still_run_under_their_locks() {
    registry::with_manager(LockManager::memory(), async {
        assert_eq!(
            templated("acme").await.expect("memory store"),
            Some(4),
            "templated"
        );
        assert_eq!(nightly_a().await.expect("override"), Some(()), "nightly_a");
        assert_eq!(nightly_b().await.expect("override"), Some(()), "nightly_b");
        assert_eq!(unmanaged().await.expect("override"), Some(()), "unmanaged");
    })
    .await;
}
