//! PostgreSQL, one module per area: the contract and lifecycle suites, the
//! store's own behaviours, its edges and its read side.

#[path = "postgres/contract.rs"]
mod contract;
#[path = "postgres/edges.rs"]
mod edges;
#[path = "postgres/lifecycle.rs"]
mod lifecycle;
#[path = "postgres/read.rs"]
mod read;
#[path = "postgres/store.rs"]
mod store;
