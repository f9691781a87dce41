//! Five workers try to build the same report at once; the lock lets exactly
//! one of them do it. Runs on the embedded memory store: no server needed.
//!
//! ```sh
//! cargo run -p lock-core --example quickstart
//! ```
//!
//! With `REDIS_URL` set it runs on Redis instead, and each build takes 5 s:
//! start it in two terminals at once and only one process builds the report.
//!
//! ```sh
//! REDIS_URL=redis://127.0.0.1:6379 cargo run -p lock-core --features redis --example quickstart
//! ```

use std::time::{Duration, Instant};

use lock_core::{LockManager, locked, registry};

#[derive(Debug)]
struct Report {
    tenant: String,
    built_by: usize,
}

/// Builds the tenant's report, unless another worker is already building it.
///
/// `#[locked]` makes it return `lock_core::Result<Option<Report>>`: `None`
/// when another worker holds `reports:{tenant}`, in which case the body does
/// not run.
#[locked(name = "reports:{tenant}", ttl = "10m")]
async fn build_report(worker: usize, tenant: &str) -> Report {
    // The expensive part: only one worker at a time gets here.
    tokio::time::sleep(build_time()).await;
    Report {
        tenant: tenant.to_owned(),
        built_by: worker,
    }
}

#[tokio::main]
async fn main() -> lock_core::Result<()> {
    registry::install(manager().await?)?;
    let started = Instant::now();

    println!("5 workers ask for the `acme` report at the same moment:");
    let workers: Vec<_> = (1..=5)
        .map(|worker| tokio::spawn(async move { (worker, build_report(worker, "acme").await) }))
        .collect();
    let mut built = 0;
    for worker in workers {
        let (worker, outcome) = worker.await.expect("worker task panicked");
        match outcome? {
            Some(report) => {
                built += 1;
                println!(
                    "  worker {worker}: built the {} report (worker {}) after {:?}",
                    report.tenant,
                    report.built_by,
                    started.elapsed()
                );
            }
            None => println!("  worker {worker}: None, someone else holds reports:acme"),
        }
    }
    // Say what is true now: on a shared store another process may hold it.
    let now = match registry::manager()
        .lock("reports:acme", Duration::from_secs(600))
        .holder()
        .await?
    {
        None => "the lock is free again".to_owned(),
        Some(holder) => format!(
            "the lock is held by {} for {:?} more",
            holder.owner(),
            holder.remaining_ttl()
        ),
    };
    println!("{built} of 5 workers in this process ran the body; {now}.");

    let waited = Instant::now();
    let lock = registry::manager()
        .lock("reports:acme", Duration::from_secs(600))
        .wait_for(Duration::from_secs(2));
    let Some(holder) = lock.acquire().await? else {
        println!(
            "Another process holds reports:acme now; run one copy alone to see the hand-over."
        );
        return Ok(());
    };
    let waiter = tokio::spawn(async move { lock.acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await?;
    let handed_over = waiter.await.expect("waiter task panicked")?;
    println!(
        "A caller that waits (wait_for 2s) got it when the holder released: {} after {:?}",
        handed_over.is_some(),
        waited.elapsed()
    );
    if let Some(guard) = handed_over {
        // Released explicitly: a guard dropped as `main` returns would leave
        // a Redis lease standing until its ttl, the runtime being gone.
        guard.release().await?;
    }
    Ok(())
}

/// A Redis manager when `REDIS_URL` is set (shared by every process using
/// that server), the memory store otherwise.
async fn manager() -> lock_core::Result<LockManager> {
    match std::env::var("REDIS_URL") {
        #[cfg(feature = "redis")]
        Ok(url) => {
            println!("Using Redis at REDIS_URL: locks are shared with other processes.");
            Ok(LockManager::new(
                lock_core::RedisStore::connect(&url).await?,
            ))
        }
        #[cfg(not(feature = "redis"))]
        Ok(_) => {
            println!(
                "REDIS_URL is set but this build lacks the `redis` feature; add `--features redis`. Using memory."
            );
            Ok(LockManager::memory())
        }
        Err(_) => Ok(LockManager::memory()),
    }
}

/// Long enough on Redis to start a second process while the first builds.
fn build_time() -> Duration {
    if cfg!(feature = "redis") && std::env::var_os("REDIS_URL").is_some() {
        Duration::from_secs(5)
    } else {
        Duration::from_millis(300)
    }
}
