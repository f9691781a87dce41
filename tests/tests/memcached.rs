//! memcached, one module per area: the contract and lifecycle suites, the
//! store's own behaviours and its edges.

#[path = "memcached/contract.rs"]
mod contract;
#[path = "memcached/edges.rs"]
mod edges;
#[path = "memcached/lifecycle.rs"]
mod lifecycle;
#[path = "memcached/store.rs"]
mod store;
