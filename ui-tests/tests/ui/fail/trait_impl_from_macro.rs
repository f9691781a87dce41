// When the method's name comes from another macro's input, the source at
// that place does not show the method, so #[locked] cannot tell it is in a
// trait impl: the expansion's companion const still refuses it, in
// rustc's words but naming the fix.
use lock_core::locked;

trait Job {
    async fn run(&self) -> u32;
}

struct Nightly;

macro_rules! job {
    ($name:ident) => {
        impl Job for Nightly {
            #[locked(ttl = "30s")]
            async fn $name(&self) -> u32 {
                1
            }
        }
    };
}

job!(run);

fn main() {
    let _ = Nightly.run();
}
