//! A lock-core store written outside lock-core: leases in a `HashMap`
//! behind TCP, built with the public
//! [`LockStore`](lock_core::store::LockStore) trait and
//! [`lock_core::store::kit`] alone.
//!
//! It is the shape of a networked store, small enough to read in one
//! sitting: a server ([`MapServer`]) that carries out each request
//! atomically, and a client ([`MapStore`]) that keeps the
//! [contract](lock_core::store#the-contract) with the kit's pieces:
//!
//! - every call bounded by one [`Deadline`](lock_core::store::kit::Deadline);
//!   a call that runs out of time, or is dropped mid-request, throws its
//!   connection away rather than putting it back with a reply still on
//!   its way;
//! - keys and TTLs checked at the store's own door
//!   ([`check_key`](lock_core::store::kit::check_key),
//!   [`validate_ttl`](lock_core::store::kit::validate_ttl)), TTLs rounded
//!   up to the store's resolution
//!   ([`store_ttl`](lock_core::store::kit::store_ttl));
//! - waiters registered with [`Waiters`](lock_core::store::kit::Waiters)
//!   *before* the acquire is sent, woken by a subscription to the server's
//!   releases that a [`Background`](lock_core::store::kit::Background) task
//!   keeps up, reconnecting with
//!   [`Backoff`](lock_core::store::kit::Backoff);
//! - the URL read with [`scheme`](lock_core::store::kit::scheme) and shown
//!   only [`redacted`](lock_core::store::kit::redacted).
//!
//! One job per file: `protocol.rs` (the lines on the wire), `server.rs`
//! (the server), `connection.rs` (one client connection), `wakeups.rs`
//! (the subscription), `config.rs` (settings and URL), `store.rs` (the
//! store). Its tests run lock-core's published contract and lifecycle
//! suites against it.
//!
//! ```
//! use std::time::Duration;
//! use lock_core::LockManager;
//! use lock_store_example::{MapServer, MapStore};
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let server = MapServer::start().await?;
//! let locks = LockManager::new(MapStore::connect(&server.url()).await?);
//! let guard = locks.lock("reports", Duration::from_secs(30)).acquire().await?;
//! assert!(guard.is_some(), "a free lock is ours");
//! # Ok(()) }
//! ```
//!
//! # The protocol
//!
//! One request per line, one reply line per request (a listing: a count,
//! then that many entries). Keys, tokens and prefixes travel as the hex of
//! their UTF-8 bytes (`-` when empty), so no lock name can split a line;
//! durations are whole milliseconds, a remaining TTL rounded up.
//!
//! | request | reply |
//! |---|---|
//! | `PING` | `PONG` |
//! | `ACQUIRE <key> <token> <ttl-ms>` | `ACQUIRED`, or `HELD <remaining-ms>` |
//! | `RELEASE <key> <token>` | `YES` (it was ours and is gone) or `NO` |
//! | `EXTEND <key> <token> <ttl-ms>` | `YES` or `NO` |
//! | `FORCE <key>` | `YES` (there was a lease) or `NO` |
//! | `HOLDER <key>` | `FREE`, or `HOLDER <token> <remaining-ms>` |
//! | `LIST <prefix>` | `LISTED <n>`, then `n` lines `ENTRY <key> <token> <remaining-ms>` |
//! | `SUBSCRIBE` | `SUBSCRIBED`, then `RELEASED <key>` per release, force-release or expiry found |
//!
//! A request the server cannot read is answered `ERROR <why>`.

mod config;
mod connection;
mod protocol;
mod server;
mod store;
mod wakeups;

pub use self::config::MapConfig;
pub use self::server::MapServer;
pub use self::store::MapStore;
