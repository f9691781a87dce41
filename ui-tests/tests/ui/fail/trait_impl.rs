// In a plain trait impl the method's signature is the trait's: #[locked]
// cannot change its return type, and the error must say what to do instead.
use lock_core::locked;

trait Job {
    async fn run(&self) -> u32;
}

struct Nightly;

impl Job for Nightly {
    #[locked(ttl = "30s")]
    async fn run(&self) -> u32 {
        1
    }
}

fn main() {
    let _ = Nightly.run();
}
