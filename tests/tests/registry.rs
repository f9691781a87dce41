//! The application-wide registry: installing managers and resolving them.
//!
//! These tests share one process's globals, so each uses its own names;
//! nothing installed, and a manager taken before the install, live in test
//! binaries of their own (`registry_uninstalled`, `registry_late_install`).

use std::time::Duration;

use lock_core::{Error, LockManager, registry};

/// The default manager is installed once at startup. A second install must
/// fail loudly rather than switch stores under locks already taken.
#[test]
fn a_second_install_is_an_error_and_the_first_manager_stays() {
    registry::install(LockManager::memory().with_prefix("first:")).expect("first install");
    let second = registry::install(LockManager::memory().with_prefix("second:"));
    assert!(
        matches!(second, Err(Error::AlreadyInstalled)),
        "second install: {second:?}"
    );
    assert_eq!(
        registry::manager().prefix(),
        "first:",
        "the first manager stays installed"
    );
}

/// Named managers let one app keep several stores (say, a Redis for
/// cross-server jobs and memory for per-process ones).
#[test]
fn a_named_manager_is_found_by_its_name_and_a_name_is_taken_once() {
    registry::install_named("reports", LockManager::memory().with_prefix("reports:"))
        .expect("install reports");
    let found = registry::manager_named("reports").expect("installed");
    assert_eq!(
        found.prefix(),
        "reports:",
        "the manager installed under that name"
    );
    let again = registry::install_named("reports", LockManager::memory());
    assert!(
        matches!(again, Err(Error::NameTaken { ref name }) if name == "reports"),
        "a name is taken once: {again:?}"
    );
}

/// Asking for a manager nobody installed is a configuration mistake; the
/// error must say how to fix it.
#[test]
fn an_unknown_named_manager_is_an_error_that_says_how_to_install_it() {
    let missing = registry::manager_named("nobody-installed-this");
    let Err(error) = missing else {
        panic!("an unknown name must be an error");
    };
    assert!(matches!(error, Error::UnknownManager { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("install_named(\"nobody-installed-this\""),
        "the message shows the call that fixes it: {message}"
    );
}

/// Tests must be able to swap the manager without touching globals that
/// other tests (running in parallel threads) rely on.
#[tokio::test(flavor = "current_thread")]
async fn with_manager_wins_over_every_installed_manager_for_its_task_only() {
    registry::install_named(
        "overridden",
        LockManager::memory().with_prefix("installed:"),
    )
    .expect("install");
    let own = LockManager::memory().with_prefix("own:");
    registry::with_manager(own, async {
        assert_eq!(
            registry::manager().prefix(),
            "own:",
            "wins over the default"
        );
        let named = registry::manager_named("overridden").expect("resolves");
        assert_eq!(named.prefix(), "own:", "wins over named managers too");
        let unknown = registry::manager_named("never-installed").expect("resolves");
        assert_eq!(unknown.prefix(), "own:", "and over missing ones");
    })
    .await;
    assert_eq!(
        registry::manager_named("overridden")
            .expect("installed")
            .prefix(),
        "installed:",
        "outside the scope, the installed manager is back"
    );
}

/// Two tests overriding at once must each see their own manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_overrides_do_not_see_each_other() {
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            tokio::spawn(registry::with_manager(
                LockManager::memory().with_prefix(format!("task{i}:")),
                async move {
                    for _ in 0..50 {
                        tokio::task::yield_now().await;
                        assert_eq!(registry::manager().prefix(), format!("task{i}:"));
                    }
                    let lock = registry::manager().lock("shared-name", Duration::from_secs(30));
                    lock.acquire().await.expect("acquire").is_some()
                },
            ))
        })
        .collect();
    for task in tasks {
        assert!(
            task.await.expect("task ran"),
            "each override has its own store, so nobody contends"
        );
    }
}
