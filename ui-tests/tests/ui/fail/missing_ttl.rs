// Without a ttl a crashed holder would keep the lock forever.
use lock_core::locked;

#[locked(name = "reports")]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
