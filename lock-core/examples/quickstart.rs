//! Five workers try to build the same report at once; the lock lets exactly
//! one of them do it. Runs on the embedded memory store: no server needed.
//!
//! ```sh
//! cargo run -p lock-core --example quickstart
//! ```

use std::time::{Duration, Instant};

use lock_core::{LockManager, registry};

#[derive(Debug)]
struct Report {
    tenant: String,
    built_by: usize,
}

/// Builds the tenant's report, unless another worker is already building it.
async fn build_report(worker: usize, tenant: &str) -> lock_core::Result<Option<Report>> {
    registry::manager()
        .lock(format!("reports:{tenant}"), Duration::from_secs(600))
        .run(async {
            // The expensive part: only one worker at a time gets here.
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok(Report {
                tenant: tenant.to_owned(),
                built_by: worker,
            })
        })
        .await
}

#[tokio::main]
async fn main() -> lock_core::Result<()> {
    registry::install(LockManager::memory())?;
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
    println!("{built} of 5 workers ran the body; the lock is free again.");

    let waited = Instant::now();
    let lock = registry::manager()
        .lock("reports:acme", Duration::from_secs(600))
        .wait_for(Duration::from_secs(2));
    let holder = lock.acquire().await?.expect("the lock is free");
    let waiter = tokio::spawn(async move { lock.acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    holder.release().await?;
    let handed_over = waiter.await.expect("waiter task panicked")?;
    println!(
        "A caller that waits (wait_for 2s) got it when the holder released: {} after {:?}",
        handed_over.is_some(),
        waited.elapsed()
    );
    Ok(())
}
