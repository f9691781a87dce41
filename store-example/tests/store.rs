//! The map store under the suites every store must pass, and what they do
//! not reach, one module each, on map servers started for each test.

mod common;

/// The store contract suite.
mod contract {
    lock_test_kit::store_contract!(super::common::manager());
}

/// The lease lifecycle suite. No fencing: the fencing behaviour checks
/// that a fenced lock is refused.
mod lifecycle {
    lock_test_kit::lifecycle_contract!(super::common::manager());
}

#[path = "store/connections.rs"]
mod connections;
