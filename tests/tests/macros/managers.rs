//! `#[locked]` and the registry: which manager a locked function uses.

use std::time::Duration;

use lock_core::{Error, LockManager, locked, registry};

const TTL: Duration = Duration::from_secs(60);

/// Held by each test that looks at the billing manager's "invoices" lock:
/// tests run in parallel, and one holding it would fail another's check
/// that it was never touched.
static BILLING_TESTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Installed once for this test binary; every test that uses it goes
/// through this function.
fn billing() -> LockManager {
    static BILLING: std::sync::OnceLock<LockManager> = std::sync::OnceLock::new();
    BILLING
        .get_or_init(|| {
            let manager = LockManager::memory();
            registry::install_named("macro-tests-billing", manager.clone())
                .expect("installed once, by this function only");
            manager
        })
        .clone()
}

#[locked(name = "invoices", ttl = "1m", manager = "macro-tests-billing")]
async fn send_invoices() -> u8 {
    1
}

#[locked(name = "invoices", ttl = "1m", manager = "macro-tests-never-installed")]
async fn uses_a_missing_manager() -> u8 {
    1
}

// `manager = "x"` must take the lock in that manager's store, so locks of
// different subsystems can live in different stores.
#[tokio::test]
async fn a_named_manager_key_takes_the_lock_in_that_manager() {
    let _serial = BILLING_TESTS.lock().await;
    let billing = billing();
    let held = billing
        .lock("invoices", TTL)
        .acquire()
        .await
        .expect("memory store")
        .expect("nobody holds it yet");
    assert_eq!(
        send_invoices().await.expect("the manager is installed"),
        None,
        "the lock held in the billing manager blocks the call"
    );
    held.release().await.expect("memory store");
    assert_eq!(
        send_invoices().await.expect("the manager is installed"),
        Some(1),
        "free in the billing manager: the call runs"
    );
}

// A missing manager must fail the call with an error that names the fix,
// never fall back to another store silently.
#[tokio::test]
async fn a_named_manager_that_is_not_installed_fails_the_call() {
    let error = uses_a_missing_manager()
        .await
        .expect_err("no manager is installed under that name");
    assert!(
        matches!(&error, Error::UnknownManager { name } if name == "macro-tests-never-installed"),
        "got {error:?}"
    );
    assert!(
        error.to_string().contains("install_named"),
        "the message says how to fix it: {error}"
    );
}

// Tests swap the store per task with `with_manager`; it must win over both
// the default and the named managers, or tests would share global state.
#[tokio::test]
async fn with_manager_overrides_default_and_named_managers_for_the_task() {
    let _serial = BILLING_TESTS.lock().await;
    let billing = billing();
    let own = LockManager::memory();
    registry::with_manager(own.clone(), async {
        let held = own
            .lock("invoices", TTL)
            .acquire()
            .await
            .expect("memory store")
            .expect("nobody holds it yet");
        assert_eq!(
            send_invoices().await.expect("the override is a manager"),
            None,
            "the override's lock blocks a manager = \"...\" function"
        );
        assert_eq!(
            uses_a_missing_manager()
                .await
                .expect("the override wins over the missing one"),
            None,
            "the override is used even for a manager that is not installed"
        );
        held.release().await.expect("memory store");
    })
    .await;
    assert!(
        !billing
            .lock("invoices", TTL)
            .is_held()
            .await
            .expect("memory store"),
        "the billing manager was never touched"
    );
}

#[locked(name = "payouts", ttl = "1m", shared)]
async fn pay_out() -> u8 {
    3
}

// A test runs `shared` code on a memory manager under `with_manager`, and
// gets `NotShared`: its message must say the test's fix, a manager
// declared shared, not the production one (install Redis), which would
// send the test's author the wrong way.
#[tokio::test]
async fn a_shared_lock_refused_under_with_manager_names_declared_shared() {
    let refused = registry::with_manager(LockManager::memory(), pay_out()).await;
    let Err(error) = refused else {
        panic!("a memory manager is per-process: {refused:?}");
    };
    let text = error.to_string();
    assert!(
        text.contains("registry::with_manager(LockManager::memory().declared_shared(), ..)"),
        "names the test's fix in full: {text}"
    );
    let vouched = registry::with_manager(LockManager::memory().declared_shared(), pay_out())
        .await
        .expect("declared shared");
    assert_eq!(vouched, Some(3), "runs once the manager is declared shared");

    // Outside an override the same refusal keeps the application's fix.
    let locks = LockManager::memory();
    let outside = locks.lock("payouts", TTL).shared().acquire().await;
    let Err(error) = outside else {
        panic!("a memory manager is per-process: {outside:?}");
    };
    let text = error.to_string();
    assert!(
        text.contains("install a manager over a shared store") && !text.contains("with_manager"),
        "an application is told to install a shared store: {text}"
    );
}
