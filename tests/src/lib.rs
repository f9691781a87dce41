//! Shared pieces of the integration tests: the store contract suite, test
//! stores and log capture.

pub mod cancellation;
pub mod chaos;
pub mod children;
pub mod contract;
pub mod etcd;
pub mod harness;
pub mod instrumented;
pub mod kept;
pub mod lifecycle;
pub mod logs;
pub mod memcached;
pub mod postgres;
pub mod proxy;
pub mod raw;
pub mod sentinel;
pub mod server;
