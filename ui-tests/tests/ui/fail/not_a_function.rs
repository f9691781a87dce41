// #[locked] wraps a function body; on anything else it must say where it goes.
use lock_core::locked;

#[locked(ttl = "30s")]
struct Report {
    id: u32,
}

fn main() {
    let _ = Report { id: 1 }.id;
}
