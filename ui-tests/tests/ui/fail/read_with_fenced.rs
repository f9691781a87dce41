// A fencing token orders the writers of a name, and readers hold it
// together: the message says why and what to drop, at `read`.
use lock_core::locked;

#[locked(name = "catalog:{id}", ttl = "30s", wait = "1s", fenced, read)]
async fn show_catalog(id: u64) -> Result<String, lock_core::Error> {
    Ok(format!("catalog {id}"))
}

fn main() {}
