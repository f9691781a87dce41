//! The registry with nothing installed: locks fail closed. Its own test
//! binary, so that nothing installs a default manager here.
//!
//! The tests take turns (`SERIAL`): a `with_manager` scope alive in one of
//! them changes what the others' errors say (see the spawned-task test).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lock_core::{LockManager, locked, registry};

const TTL: Duration = Duration::from_secs(30);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
    let _serial = SERIAL.lock().await;
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
    let _serial = SERIAL.lock().await;
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

// A test's override does not reach the tasks its code spawns (tokio does
// not pass task-locals on). With nothing installed, such a task's locks
// must fail saying so, not with advice to install a manager the test
// already gave.
#[tokio::test(flavor = "current_thread")]
async fn a_task_spawned_inside_with_manager_is_told_it_runs_outside_it() {
    let _serial = SERIAL.lock().await;
    let spawned = registry::with_manager(LockManager::memory(), async {
        tokio::spawn(async {
            registry::manager()
                .lock("thumbnails", TTL)
                .acquire()
                .await
                .map(|guard| guard.is_some())
        })
        .await
        .expect("the task ran")
    })
    .await;
    let Err(error) = spawned else {
        panic!("the spawned task has no manager: {spawned:?}");
    };
    let text = error.to_string();
    assert!(
        text.contains(
            "this task runs outside registry::with_manager (a spawned task does not inherit it)"
        ) && text.contains("tokio::spawn(registry::with_manager(manager, future))"),
        "names the spawned task and the fix: {text}"
    );

    // What the message says to do works.
    let wrapped = registry::with_manager(LockManager::memory(), async {
        let locks = registry::manager();
        tokio::spawn(registry::with_manager(locks, async {
            registry::manager().lock("thumbnails", TTL).acquire().await
        }))
        .await
        .expect("the task ran")
    })
    .await;
    assert!(
        wrapped.is_ok_and(|guard| guard.is_some()),
        "a wrapped task takes the lock in the test's manager"
    );
}

// A manager taken from the registry outside the test's `with_manager`
// (built with the code under test, before the scope) stands for the
// default manager, not for the override: its error must say where to
// take it instead.
#[tokio::test(flavor = "current_thread")]
async fn a_manager_taken_outside_with_manager_says_so_when_used_inside_it() {
    let _serial = SERIAL.lock().await;
    let early = registry::manager();
    let used = registry::with_manager(LockManager::memory(), async {
        early.lock("exports", TTL).acquire().await
    })
    .await;
    let Err(error) = used else {
        panic!("the early manager has no default to resolve: {used:?}");
    };
    let text = error.to_string();
    assert!(
        text.contains("outside `registry::with_manager`")
            && text.contains("call `registry::manager()` inside the `with_manager` scope"),
        "says where to take the manager: {text}"
    );
}

static TURNS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

#[locked(name = "cache-rebuild", ttl = "30s", manager = "process")]
async fn rebuild_cache() -> u8 {
    TURNS.fetch_add(1, Ordering::SeqCst) + 1
}

// A lock meant for this process only, and a lock taken before anything
// can be installed (`#[locked]` above `#[tokio::test]`), say so where they
// are written: `manager = "process"` works with nothing installed, and
// its locks exclude this process's tasks.
#[tokio::test(flavor = "current_thread")]
async fn a_lock_on_the_process_manager_works_with_nothing_installed() {
    let _serial = SERIAL.lock().await;
    assert_eq!(
        rebuild_cache().await.expect("the process manager"),
        Some(1),
        "runs with nothing installed"
    );
    let locks = registry::manager_named(registry::PROCESS).expect("every process has it");
    assert!(!locks.is_shared(), "this process only");
    let held = locks
        .lock("cache-rebuild", TTL)
        .acquire()
        .await
        .expect("memory")
        .expect("free");
    assert_eq!(
        rebuild_cache().await.expect("the process manager"),
        None,
        "excluded by a holder in this process"
    );
    held.release().await.expect("released");
}
