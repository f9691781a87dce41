// Readers already share the name, so `permits` has nothing to count, whatever
// its value: the message says why and what to drop, at `read`.
use lock_core::locked;

#[locked(name = "catalog:{id}", ttl = "30s", wait = "1s", read, permits = 1)]
async fn show_catalog(id: u64) -> Result<String, lock_core::Error> {
    Ok(format!("catalog {id}"))
}

#[locked(name = "catalog:{id}", ttl = "30s", permits = 4, read)]
async fn count_catalog(id: u64) -> Result<u64, lock_core::Error> {
    Ok(id)
}

fn main() {}
