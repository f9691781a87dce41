// A duration with a unit that does not exist.
use lock_core::locked;

#[locked(ttl = "10x")]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
