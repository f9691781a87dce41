// The same order mistake under #[tokio::test].
use lock_core::locked;

#[tokio::test]
#[locked(name = "db-tests", ttl = "30s", wait = "30s", contended = "error")]
async fn uses_the_database() -> Result<(), lock_core::Error> {
    Ok(())
}

fn main() {}
