// A placeholder must name an argument; the message lists the arguments.
use lock_core::locked;

#[locked(name = "reports:{tenant_id}", ttl = "30s")]
async fn build_report(tenant: &str, day: u32) -> u32 {
    day + tenant.len() as u32
}

#[locked(name = "reports:{self.tenant}", ttl = "30s")]
async fn not_a_method(tenant: &str) -> usize {
    tenant.len()
}

fn main() {
    let _ = build_report("acme", 1);
    let _ = not_a_method("acme");
}
