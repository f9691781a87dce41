//! A manager taken from the registry before the default manager is
//! installed. Its own test binary: it installs the default, which no other
//! test of the binary may see missing or installed first.

use std::time::Duration;

use lock_core::{LockManager, registry};

const TTL: Duration = Duration::from_secs(30);

// Services are often built before `main` installs the manager, and keep
// what `registry::manager()` gave them. That value must not stay a
// per-process store (or stay failing) forever: it stands for the default
// manager, and each use finds the one installed by then.
#[tokio::test(flavor = "current_thread")]
async fn a_manager_taken_before_install_uses_the_manager_installed_later() {
    let early = registry::manager();
    assert!(!early.is_shared(), "nothing installed: not shared");
    let before = early.lock("nightly", TTL);
    assert!(
        before.acquire().await.is_err(),
        "nothing installed: the lock fails closed"
    );

    registry::install(LockManager::memory().with_prefix("app:").declared_shared())
        .expect("installed once, by this test only");

    assert!(early.is_shared(), "the installed manager's shared-ness");
    assert_eq!(early.prefix(), "app:", "the installed manager's prefix");
    let lock = early.lock("nightly", TTL);
    assert_eq!(lock.key(), "app:nightly", "keys under the installed prefix");
    let guard = lock
        .acquire()
        .await
        .expect("the installed store")
        .expect("free");
    assert!(
        registry::manager()
            .lock("nightly", TTL)
            .is_held()
            .await
            .expect("the installed store"),
        "the same store as the manager the registry gives now"
    );
    guard.release().await.expect("released");

    // A prefix of its own stays its own, on the installed store.
    let own = early.clone().with_prefix("own:");
    assert_eq!(own.prefix(), "own:", "its own prefix");
    assert!(own.is_shared(), "on the installed, shared, manager");

    // A lock is bound when built: one built before the install keeps
    // failing rather than take a key under a prefix nobody else uses.
    assert!(
        before.acquire().await.is_err(),
        "a lock built before the install stays without a manager"
    );
}
