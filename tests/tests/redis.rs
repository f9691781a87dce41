//! Redis: one server, a cluster and Sentinel, one module per area: the
//! contract and lifecycle suites on each, the store's own behaviours, its
//! edges, a reader's check of its lease, and failover with replicas.

#[path = "redis/cluster_contract.rs"]
mod cluster_contract;
#[path = "redis/cluster_lifecycle.rs"]
mod cluster_lifecycle;
#[path = "redis/contract.rs"]
mod contract;
#[path = "redis/edges.rs"]
mod edges;
#[path = "redis/lifecycle.rs"]
mod lifecycle;
#[path = "redis/readers.rs"]
mod readers;
#[path = "redis/sentinel.rs"]
mod sentinel;
#[path = "redis/sentinel_contract.rs"]
mod sentinel_contract;
#[path = "redis/store.rs"]
mod store;
