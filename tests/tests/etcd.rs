//! etcd, one module per area: the contract and lifecycle suites, the
//! store's own behaviours (a three-member cluster among them), its edges,
//! reading the holder while it renews, and its read side.

#[path = "etcd/contract.rs"]
mod contract;
#[path = "etcd/edges.rs"]
mod edges;
#[path = "etcd/holder.rs"]
mod holder;
#[path = "etcd/lifecycle.rs"]
mod lifecycle;
#[path = "etcd/read.rs"]
mod read;
#[path = "etcd/store.rs"]
mod store;
