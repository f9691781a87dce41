// A key given twice.
use lock_core::locked;

#[locked(ttl = "30s", ttl = "1m")]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
