// Flags are written bare, and keys that take a value need one: each mistake
// says how to write it.
use lock_core::locked;

#[locked(ttl = "30s", renew = true, fenced(), max_hold, on_lost = cancel)]
async fn rebuild_index() {}

fn main() {
    let _ = rebuild_index();
}
