// `permits` must be a positive integer literal that fits, and cannot go with
// `fenced`: each misuse says the fix.
use lock_core::locked;

#[locked(name = "payments", ttl = "30s", permits = 0)]
async fn nobody() -> Result<(), lock_core::Error> {
    Ok(())
}

#[locked(name = "payments", ttl = "30s", permits = 99999999999)]
async fn too_many() -> Result<(), lock_core::Error> {
    Ok(())
}

fn main() {}
