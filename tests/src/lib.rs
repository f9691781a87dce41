//! Shared pieces of the integration tests: the servers they run against
//! (started or found), fault injection and log capture. The store contract,
//! lifecycle and cancellation suites are the published `lock-test-kit`.

pub mod certs;
pub mod chaos;
pub mod children;
pub mod elections;
pub mod etcd;
pub mod harness;
pub mod kept;
pub mod logs;
pub mod memcached;
pub mod postgres;
pub mod postgres_tls;
pub mod proxy;
pub mod raw;
pub mod sentinel;
pub mod server;
