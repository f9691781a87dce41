// A zero ttl would expire the lease the moment it is taken.
use lock_core::locked;

#[locked(ttl = "0s")]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
