// A generic error type cannot get an `impl From<lock_core::Error>`: the
// message must ask for the `where` bound instead.
use lock_core::locked;

trait Store {
    type Error;
}

#[locked(ttl = "30s")]
async fn save<S: Store>(_store: &S) -> Result<u32, S::Error> {
    Ok(1)
}

fn main() {}
