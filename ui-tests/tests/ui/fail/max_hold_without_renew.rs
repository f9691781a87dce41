// `max_hold` caps renewal; without `renew` there is nothing to cap, so the
// attribute asks for `renew` (or for `max_hold` to go).
use lock_core::locked;

#[locked(ttl = "30s", max_hold = "1h")]
async fn rebuild_index() {}

fn main() {
    let _ = rebuild_index();
}
