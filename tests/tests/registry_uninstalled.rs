//! The registry with nothing installed: locks fail closed. Its own test
//! binary, so that nothing installs a default manager here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::{locked, registry};

const TTL: Duration = Duration::from_secs(30);

static NIGHTLY_RAN: AtomicBool = AtomicBool::new(false);

#[locked(name = "nightly", ttl = "30s")]
async fn nightly() -> u8 {
    NIGHTLY_RAN.store(true, Ordering::SeqCst);
    1
}

/// The two fixes every "nothing installed" error must spell out.
fn names_both_installs(text: &str) -> bool {
    text.contains("registry::install(lock_core::connect(url).await?)")
        && text.contains("registry::install(LockManager::memory())")
}

// Three processes of a binary that never installs a manager must not each
// run the job on a store of their own: a call fails, before its body
// runs, saying what to install. A WARN before any tracing subscriber
// exists reached nobody.
#[tokio::test(flavor = "current_thread")]
async fn with_nothing_installed_a_locked_call_fails_before_its_body_and_says_what_to_install() {
    let called = nightly().await;
    let Err(error) = called else {
        panic!("nothing is installed, so the call must fail: {called:?}");
    };
    assert!(!NIGHTLY_RAN.load(Ordering::SeqCst), "the body did not run");
    let text = error.to_string();
    assert!(
        text.contains("lock:nightly") && names_both_installs(&text),
        "names the lock and both installs: {text}"
    );
}

// The same for library code that takes its locks from the registry by
// hand: `acquire`, `run` and reading the lock all fail, and the manager
// says it is not shared.
#[tokio::test(flavor = "current_thread")]
async fn with_nothing_installed_the_registrys_manager_fails_every_lock_and_is_not_shared() {
    let locks = registry::manager();
    assert!(!locks.is_shared(), "no manager is no shared manager");
    let lock = locks.lock("reports", TTL);
    let acquired = lock.acquire().await;
    let Err(error) = acquired else {
        panic!("nothing is installed: {acquired:?}");
    };
    assert!(names_both_installs(&error.to_string()), "acquire: {error}");
    let ran = lock.run(async { Ok::<_, lock_core::Error>(1) }).await;
    assert!(
        ran.as_ref()
            .is_err_and(|error| names_both_installs(&error.to_string())),
        "run: {ran:?}"
    );
    let held = lock.is_held().await;
    assert!(
        held.as_ref()
            .is_err_and(|error| names_both_installs(&error.to_string())),
        "reading it: {held:?}"
    );
    let shared = locks.lock("reports", TTL).shared().acquire().await;
    assert!(
        shared
            .as_ref()
            .is_err_and(|error| names_both_installs(&error.to_string())),
        "a `shared` lock is told what to install, not that memory is per-process: {shared:?}"
    );
}
