// `contended = "error"` returns contention as an `Err`: a function that does
// not return `Result` has nowhere to put it. The functions are still emitted
// as declared, so their callers below type-check and only the attribute's
// errors appear.
use lock_core::locked;

#[locked(ttl = "30s", contended = "error")]
async fn count_invoices() -> u32 {
    7
}

#[locked(ttl = "30s", contended = "error")]
async fn send_invoices() {}

async fn caller() -> u32 {
    send_invoices().await;
    count_invoices().await
}

fn main() {
    let _ = caller();
}
