//! Re-entry: a task that holds a lock and reaches for it again (a locked
//! function calling itself, or another locked on the same name, or `run`
//! inside `run`) never waits for itself. Other tasks are other holders.

use std::time::Duration;

use lock_core::{Error, LockManager, locked, registry};

// A call that waited for itself would wait out its `wait` and come back
// `None`: the values below (`Some` at every level) are what show re-entry,
// not timings.

#[locked(name = "reports:{tenant}", ttl = "5s", wait = "2s")]
async fn nested_report(tenant: &str, depth: u32) -> Result<u32, Error> {
    if depth == 0 {
        return Ok(0);
    }
    // Across an await point, then into itself: the same name, rendered the
    // same way.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let inner = Box::pin(nested_report(tenant, depth - 1)).await?;
    Ok(inner.expect("re-entered, not contended") + 1)
}

#[locked(name = "reports:{tenant}", ttl = "5s", wait = "2s")]
async fn summary(tenant: &str) -> Result<&'static str, Error> {
    let _ = tenant;
    Ok("summary")
}

#[locked(name = "reports:{tenant}", ttl = "5s", wait = "2s")]
async fn report_with_summary(tenant: &str) -> Result<&'static str, Error> {
    let inner = summary(tenant).await?;
    Ok(inner.expect("another function locked on the same name re-enters"))
}

#[locked(name = "reports:{tenant}", ttl = "5s", wait = "100ms")]
async fn report_spawning_a_copy(tenant: &'static str, locks: LockManager) -> Result<bool, Error> {
    // A spawned task does not inherit the lease: it is another holder and
    // finds the lock held.
    let spawned = tokio::spawn(registry::with_manager(locks, summary(tenant)));
    let got = spawned.await.expect("task")?;
    Ok(got.is_some())
}

#[tokio::test]
async fn a_locked_function_calling_itself_returns_promptly_under_its_own_lease() {
    let locks = LockManager::memory();
    registry::with_manager(locks.clone(), async {
        let depth = nested_report("acme", 5).await.expect("run");
        assert_eq!(depth, Some(5), "every level ran");
        assert!(
            !locks
                .lock("reports:acme", Duration::from_secs(1))
                .is_held()
                .await
                .expect("memory"),
            "given back once, by the outermost call"
        );
    })
    .await;
}

#[tokio::test]
async fn another_function_locked_on_the_same_name_re_enters() {
    let locks = LockManager::memory();
    registry::with_manager(locks.clone(), async {
        assert_eq!(
            report_with_summary("acme").await.expect("run"),
            Some("summary")
        );
        // A different name is a different lock, taken normally.
        assert_eq!(summary("globex").await.expect("run"), Some("summary"));
    })
    .await;
}

#[tokio::test]
async fn a_task_spawned_from_locked_work_does_not_inherit_the_lease() {
    let locks = LockManager::memory();
    let inner = locks.clone();
    let ran = registry::with_manager(locks, report_spawning_a_copy("acme", inner))
        .await
        .expect("run");
    assert_eq!(
        ran,
        Some(false),
        "the spawned copy waited and was told it is held"
    );
}

#[tokio::test]
async fn run_inside_run_re_enters_and_acquire_inside_run_says_why_it_cannot() {
    let locks = LockManager::memory();
    let lock = locks
        .lock("import", Duration::from_secs(5))
        .wait_for(Duration::from_secs(2));
    let nested = lock
        .run(async {
            let outer = lock_core::current().expect("a lease");
            let inner = lock
                .run(async {
                    let seen = lock_core::current().expect("a lease");
                    Ok::<_, Error>(seen.token().to_owned())
                })
                .await?;
            // The guard API would make a second lease: refused at once.
            let acquired = lock.acquire().await;
            assert!(
                matches!(acquired, Err(Error::Reentrant { .. })),
                "{acquired:?}"
            );
            let message = acquired.expect_err("reentrant").to_string();
            assert!(message.contains("use `run`"), "says what to do: {message}");
            Ok::<_, Error>((outer.token().to_owned(), inner))
        })
        .await
        .expect("run")
        .expect("free");
    assert_eq!(
        Some(nested.0),
        nested.1,
        "the inner work ran under the outer lease"
    );
    assert!(!lock.is_held().await.expect("memory"), "given back once");

    // The same name on another manager is another lock: taken for real.
    let elsewhere = LockManager::memory();
    let other = elsewhere.lock("import", Duration::from_secs(5));
    let both = lock
        .run(async {
            let inner = other
                .run(async { Ok::<_, Error>(lock_core::current()) })
                .await?;
            Ok::<_, Error>(inner.flatten().map(|lease| lease.key().to_owned()))
        })
        .await
        .expect("run")
        .expect("free");
    assert_eq!(both.as_deref(), Some("lock:import"), "its own lease");
}

#[tokio::test]
async fn a_semaphore_permit_re_enters_too() {
    let locks = LockManager::memory();
    let lock = locks.lock("workers", Duration::from_secs(5)).permits(2);
    let ran = lock
        .run(async {
            let inner = lock
                .run(async { Ok::<_, Error>(lock_core::current()) })
                .await?;
            Ok::<_, Error>(inner.flatten().is_some())
        })
        .await
        .expect("run");
    assert_eq!(ran, Some(true));
    assert!(
        lock.holders().await.expect("memory").is_empty(),
        "one permit, given back"
    );
}
