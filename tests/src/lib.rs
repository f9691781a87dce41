//! Shared pieces of the integration tests: the store contract suite and test stores.

pub mod contract;
pub mod instrumented;
