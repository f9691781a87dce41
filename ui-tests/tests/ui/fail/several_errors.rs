// Every mistake in one attribute is reported in one compile, and the
// function is still emitted with its rewritten type: the caller below
// type-checks, so only the attribute's errors appear.
use lock_core::locked;

#[locked(tll = "30s", wait = 5, name = "", manager = "")]
async fn build_reports() -> Result<u32, lock_core::Error> {
    Ok(1)
}

async fn caller() -> Result<Option<u32>, lock_core::Error> {
    build_reports().await
}

fn main() {
    let _ = caller();
}
