// A misspelt key gets a did-you-mean.
use lock_core::locked;

#[locked(tll = "30s")]
async fn build_reports() {}

fn main() {
    let _ = build_reports();
}
