// In a trait definition, #[locked] on a provided method would change the
// trait's signature for every implementor (and override): the companion
// const's visibility refuses it, at the attribute.
use lock_core::locked;

trait Job {
    #[locked(ttl = "30s")]
    async fn run(&self) -> u32 {
        1
    }
}

struct Nightly;

impl Job for Nightly {}

fn main() {
    let _ = Nightly.run();
}
