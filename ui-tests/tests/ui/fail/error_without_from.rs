// Lock errors come back through the function's error type, which must
// implement `From<lock_core::Error>`.
use lock_core::locked;

#[derive(Debug)]
pub struct ReportError;

type ReportResult<T> = Result<T, ReportError>;

#[locked(ttl = "30s")]
async fn build_report() -> Result<u32, ReportError> {
    Ok(1)
}

#[locked(ttl = "30s")]
async fn build_alias() -> ReportResult<u32> {
    Ok(1)
}

fn main() {
    let _ = build_report();
    let _ = build_alias();
}
