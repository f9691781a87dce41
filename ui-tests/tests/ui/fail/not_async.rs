// #[locked] waits on the store to take the lock, so the function must be async.
use lock_core::locked;

#[locked(ttl = "30s")]
fn rebuild_cache() -> u32 {
    1
}

fn main() {
    let _ = rebuild_cache();
}
