// Values are string literals: `ttl = 10` must say how to write it.
use lock_core::locked;

#[locked(ttl = 10)]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
