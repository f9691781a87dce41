// Under #[async_trait] the method's signature is the trait's: #[locked]
// cannot change its return type, and must say what to do instead.
use async_trait::async_trait;
use lock_core::locked;

#[async_trait]
trait Job {
    async fn run(&self) -> u32;
}

struct Nightly;

#[async_trait]
impl Job for Nightly {
    #[locked(ttl = "30s")]
    async fn run(&self) -> u32 {
        1
    }
}

fn main() {
    let _ = Nightly.run();
}
