// Attributes apply top to bottom: #[tokio::main] above #[locked] has already
// turned `async fn main` into a plain `fn` when #[locked] sees it. The error
// must say to move #[locked] above, not "write `async fn`".
use lock_core::locked;

#[tokio::main]
#[locked(ttl = "10m", contended = "error")]
async fn main() -> Result<(), lock_core::Error> {
    Ok(())
}
