// #[locked] above #[tokio::main] (attributes apply top to bottom): one
// instance of the program at a time. `main` keeps its `Result<(), E>` type
// because contention is an error here, not an `Option`.
use lock_core::locked;

#[locked(name = "ui-tests:one-instance", ttl = "10m", contended = "error")]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lock_core::Error> {
    let lease = lock_core::current().expect("main runs under its lock");
    assert_eq!(lease.key(), "lock:ui-tests:one-instance");
    Ok(())
}
