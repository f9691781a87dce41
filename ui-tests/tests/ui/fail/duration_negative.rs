// A negative duration.
use lock_core::locked;

#[locked(ttl = "30s", wait = "-1s")]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
