// The claim cannot outlast the lease: `at_least` beyond `ttl` is refused
// with both values and the fix.
use lock_core::locked;

#[locked(name = "report:{minute}", ttl = "30s", at_least = "1m")]
async fn minute_report(minute: u64) {
    let _ = minute;
}

fn main() {
    let _ = minute_report(0);
}
