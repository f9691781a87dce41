//! Declared locks: every `#[locked]` function in a binary is listed by
//! `registry::declared()` and checked by `registry::verify()`.
//!
//! This file is its own test binary, so the declarations below are all the
//! binary has, and the assertions can be exact.

use std::time::Duration;

use lock_core::registry::{self, OnContended, Problem};
use lock_core::{Error, LockManager, OnLost, locked};

#[locked(name = "declared:{tenant}", ttl = "10m", wait = "2s")]
async fn templated(tenant: &str) -> usize {
    tenant.len()
}

#[locked(
    name = "declared:nightly",
    ttl = "1h 30m",
    manager = "declared-tests-reports"
)]
async fn nightly_early() {}

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

#[locked(
    name = "declared:lifecycle",
    ttl = "10m",
    renew,
    max_hold = "1h",
    on_lost = "cancel",
    at_least = "5m",
    fenced,
    shared,
    contended = "error"
)]
async fn every_lease_option() -> Result<(), Error> {
    Ok(())
}

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
    assert_eq!(all.len(), 6, "six #[locked] functions here: {all:#?}");

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
        !lock.options().renew && !lock.options().fenced && !lock.options().shared,
        "flags are off unless written"
    );
    assert_eq!(lock.options().max_hold, None, "no max_hold");
    assert_eq!(
        lock.options().on_lost,
        OnLost::Continue,
        "on_lost defaults to continue"
    );
    assert_eq!(lock.options().at_least, None, "no at_least");
    assert_eq!(
        lock.options().contended,
        OnContended::ReturnNone,
        "contended defaults to none"
    );
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

    let lock = find("::every_lease_option");
    assert!(lock.options().renew, "renew");
    assert_eq!(
        lock.options().max_hold,
        Some(Duration::from_secs(3600)),
        "max_hold"
    );
    assert_eq!(lock.options().on_lost, OnLost::Cancel, "on_lost");
    assert_eq!(
        lock.options().at_least,
        Some(Duration::from_secs(300)),
        "at_least"
    );
    assert!(lock.options().fenced, "fenced");
    assert!(lock.options().shared, "shared");
    assert_eq!(lock.options().contended, OnContended::Error, "contended");

    let lines: Vec<u32> = all.iter().map(|lock| lock.line()).collect();
    assert!(lines.is_sorted(), "ordered by file and line: {lines:?}");
}

// `verify()` must report every problem in one go, so one boot tells the
// operator everything to fix: the missing default manager (whose calls
// would fail closed), the missing named one, the ttl conflict; and a
// `shared` function on a per-process manager, which goes away once its
// manager is shared.
#[tokio::test]
async fn verify_reports_missing_managers_conflicting_ttls_and_unshared_managers_together() {
    registry::install_named("declared-tests-reports", LockManager::memory())
        .expect("installed once, by this test only");
    // Nothing is installed as the default here: the functions using it
    // would fail with `NoManager`, which is the one problem reported for
    // them (the `shared` one has no manager to be unshared on).
    let problems = registry::verify().expect_err("three problems are declared above");
    assert_eq!(
        problems.len(),
        3,
        "one lock name declared three times with two ttls is one problem: {problems}"
    );
    let no_default = problems
        .iter()
        .find(|problem| matches!(problem, Problem::NoManagerInstalled { .. }))
        .expect("the missing default manager is reported");
    let text = no_default.to_string();
    assert!(
        text.contains("no default lock manager is installed")
            && text.contains("registry::install(lock_core::connect(url).await?)")
            && text.contains("registry::install(LockManager::memory())"),
        "says what is wrong and both fixes: {text}"
    );
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
    for function in ["::nightly_early", "::nightly_a", "::nightly_b"] {
        assert!(
            text.contains(function),
            "lists every declaration of the name, {function} too: {text}"
        );
    }
    assert!(
        problems.to_string().starts_with("3 problem(s)"),
        "the error lists them all: {problems}"
    );

    // The manager a call would use now decides: inside `with_manager`
    // every call resolves the override, even `manager = "..."` ones, so
    // verify must not report their manager missing; a memory override is
    // per-process, so the `shared` function is reported on it.
    let problems = registry::with_manager(LockManager::memory(), async { registry::verify() })
        .await
        .expect_err("the shared function and the ttl conflict");
    let unshared = problems
        .iter()
        .find(|problem| matches!(problem, Problem::NotShared { .. }))
        .expect("the shared declaration on a memory manager is reported");
    let text = unshared.to_string();
    assert!(
        text.contains("::every_lease_option")
            && text.contains("default lock manager")
            && text.contains("shared store"),
        "names the function, its manager and the fix: {text}"
    );
    assert_eq!(problems.len(), 2, "{problems}");

    // Once the override is shared, only the ttl conflict, which is about
    // the source, remains.
    let shared = LockManager::memory().declared_shared();
    let problems = registry::with_manager(shared, async { registry::verify() })
        .await
        .expect_err("the ttl conflict remains");
    assert!(
        problems
            .iter()
            .all(|problem| matches!(problem, Problem::ConflictingTtl { .. })),
        "calls inside the override resolve every manager, and it is shared: {problems}"
    );
    assert_eq!(problems.len(), 1, "{problems}");
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
        assert_eq!(
            nightly_early().await.expect("override"),
            Some(()),
            "nightly_early"
        );
        assert_eq!(nightly_a().await.expect("override"), Some(()), "nightly_a");
        assert_eq!(nightly_b().await.expect("override"), Some(()), "nightly_b");
        assert_eq!(unmanaged().await.expect("override"), Some(()), "unmanaged");
        assert!(
            matches!(every_lease_option().await, Err(Error::NotShared { .. })),
            "shared refuses the memory manager"
        );
    })
    .await;
}
