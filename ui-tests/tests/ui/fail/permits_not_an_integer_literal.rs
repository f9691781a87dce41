// `permits` must be a positive integer literal that fits, and cannot go with
// `fenced`: each misuse says the fix.
use lock_core::locked;

const WORKERS: u32 = 4;

#[locked(name = "payments", ttl = "30s", permits = "4")]
async fn quoted() -> Result<(), lock_core::Error> {
    Ok(())
}

#[locked(name = "payments", ttl = "30s", permits = WORKERS)]
async fn a_constant() -> Result<(), lock_core::Error> {
    Ok(())
}

#[locked(name = "payments", ttl = "30s", permits)]
async fn no_value() -> Result<(), lock_core::Error> {
    Ok(())
}

fn main() {}
