// A trait impl written by another macro, the method's name from that
// macro's input: the expansion's companion const refuses it as in a
// hand-written trait impl, in rustc's words but naming the fix, at the
// place the macro was called.
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
