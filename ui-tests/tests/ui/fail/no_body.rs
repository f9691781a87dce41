// A trait method without a body has nothing to run under the lock.
use lock_core::locked;

trait Jobs {
    #[locked(ttl = "30s")]
    async fn rebuild(&self);
}

fn main() {}
