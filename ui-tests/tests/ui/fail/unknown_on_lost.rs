// `on_lost` takes one of two words; anything else lists them.
use lock_core::locked;

#[locked(ttl = "30s", renew, on_lost = "abort")]
async fn import_feed() {}

fn main() {
    let _ = import_feed();
}
