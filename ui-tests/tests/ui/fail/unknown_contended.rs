// `contended` takes one of two words; anything else lists them.
use lock_core::locked;

#[locked(ttl = "30s", contended = "fail")]
async fn charge() -> Result<(), lock_core::Error> {
    Ok(())
}

fn main() {
    let _ = charge();
}
