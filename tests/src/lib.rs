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
pub mod netns;
pub mod postgres;
pub mod postgres_tls;
pub mod proxy;
pub mod raw;
pub mod sentinel;
pub mod server;
pub mod server_clock;

/// The Rust snippets of the workspace's Markdown files, compiled as doctests
/// of this crate (`cargo test -p lock-tests --doc`), which builds lock-core
/// with every store: a snippet a reader can copy must compile. Those that
/// need a server are `no_run`; the others run.
#[cfg(doctest)]
pub mod markdown {
    /// `README.md`.
    #[doc = include_str!("../../README.md")]
    pub struct Readme;

    /// `CONTRIBUTING.md`.
    #[doc = include_str!("../../CONTRIBUTING.md")]
    pub struct Contributing;

    /// `lock-cli/README.md`.
    #[doc = include_str!("../../lock-cli/README.md")]
    pub struct CliReadme;

    /// `docs/performance.md`.
    #[doc = include_str!("../../docs/performance.md")]
    pub struct Performance;

    /// `docs/reliability.md`.
    #[doc = include_str!("../../docs/reliability.md")]
    pub struct Reliability;
}
