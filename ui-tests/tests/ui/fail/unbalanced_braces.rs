// Braces in a name template must be balanced, or doubled to be literal.
use lock_core::locked;

#[locked(name = "reports:{tenant", ttl = "30s")]
async fn unclosed(tenant: &str) -> usize {
    tenant.len()
}

#[locked(name = "reports:tenant}", ttl = "30s")]
async fn unopened(tenant: &str) -> usize {
    tenant.len()
}

fn main() {
    let _ = unclosed("acme");
    let _ = unopened("acme");
}
