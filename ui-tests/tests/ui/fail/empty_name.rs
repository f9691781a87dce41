// An empty lock name names nothing.
use lock_core::locked;

#[locked(name = "", ttl = "30s")]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
