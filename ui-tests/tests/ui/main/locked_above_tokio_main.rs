// #[locked] above #[tokio::main] (attributes apply top to bottom). `main`
// keeps its `Result<(), E>` type because contention is an error here, not
// an `Option`. Its lock is taken before `main`'s body could install a
// manager, so it names the manager every process has; a lock that must
// exclude other processes is taken by hand in `main`, after the install.
use lock_core::locked;

#[locked(
    name = "ui-tests:one-instance",
    ttl = "10m",
    contended = "error",
    manager = "process"
)]
#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lock_core::Error> {
    let lease = lock_core::current().expect("main runs under its lock");
    assert_eq!(lease.key(), "lock:ui-tests:one-instance");
    Ok(())
}
