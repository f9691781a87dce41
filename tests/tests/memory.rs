//! The in-process memory store and the runtime over it, one module per
//! area: the store contract and lifecycle suites, the store's own
//! behaviours, its clock (monotonic under a wall-clock jump, and tokio's
//! paused clock), the read side, and the promises at the edges.

#[path = "memory/clock.rs"]
mod clock;
#[path = "memory/contract.rs"]
mod contract;
#[path = "memory/edges.rs"]
mod edges;
#[path = "memory/lifecycle.rs"]
mod lifecycle;
#[path = "memory/paused_clock.rs"]
mod paused_clock;
#[path = "memory/read_side.rs"]
mod read_side;
#[path = "memory/store.rs"]
mod store;
