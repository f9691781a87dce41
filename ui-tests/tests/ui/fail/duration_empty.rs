// An empty duration.
use lock_core::locked;

#[locked(ttl = "")]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
