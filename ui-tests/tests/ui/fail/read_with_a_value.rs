// `read` is a flag like `renew`: `read = true` reads naturally but is
// refused with how to write it.
use lock_core::locked;

#[locked(name = "catalog:{id}", ttl = "30s", wait = "1s", read = true)]
async fn show_catalog(id: u64) -> Result<String, lock_core::Error> {
    Ok(format!("catalog {id}"))
}

fn main() {}
