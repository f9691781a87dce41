// A duration too large for `std::time::Duration`.
use lock_core::locked;

#[locked(ttl = "18446744073709551616s")]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
