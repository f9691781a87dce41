// `permits` must be a positive integer literal that fits, and cannot go with
// `fenced`: each misuse says the fix.
use lock_core::locked;

#[locked(name = "payments", ttl = "30s", permits = 4, fenced)]
async fn fenced_semaphore() -> Result<(), lock_core::Error> {
    Ok(())
}

fn main() {}
