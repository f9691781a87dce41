//! What every suite leans on: lease times scaled to the store's clock, and a
//! key prefix of each test's own.
//!
//! The suites speak in milliseconds ("a 100 ms lease, then sleep 250 ms"),
//! which a store that keeps whole seconds cannot represent. [`ms`] and
//! [`longest`] turn those figures into what the store under test can keep,
//! from what it says of itself ([`LockStore::ttl_resolution`] and
//! [`LockStore::min_ttl`]), so one suite fits every store.
//!
//! [`LockStore::ttl_resolution`]: lock_core::LockStore::ttl_resolution
//! [`LockStore::min_ttl`]: lock_core::LockStore::min_ttl

use std::time::Duration;

use lock_core::LockManager;

/// `millis` milliseconds of lease time on `locks`'s store: as written on a
/// store that keeps milliseconds, ten times longer (or more, to meet its
/// minimum TTL) on one that keeps whole seconds (memcached, etcd), so every
/// TTL and every sleep around it stays well clear of the store's
/// granularity.
pub fn ms(locks: &LockManager, millis: u64) -> Duration {
    let store = locks.store();
    let scale = if store.ttl_resolution() >= Duration::from_secs(1) {
        // And so that the shortest lease here (100 ms) meets the store's
        // minimum TTL (etcd's is about 2 s).
        let minimum = store.min_ttl().as_millis().div_ceil(100);
        u64::try_from(minimum).unwrap_or(u64::MAX).max(10)
    } else {
        1
    };
    Duration::from_millis(millis * scale)
}

/// The longest `locks`'s store may keep a lease of `ttl`: rounded up to its
/// resolution, plus one more step (memcached's clock ticks once a second,
/// so it keeps an extra second to never keep less).
pub fn longest(locks: &LockManager, ttl: Duration) -> Duration {
    let step = locks.store().ttl_resolution();
    let steps = ttl.as_nanos().div_ceil(step.as_nanos().max(1));
    step * u32::try_from(steps + 1).unwrap_or(u32::MAX)
}

/// The same manager under a prefix no other test uses (the manager's own
/// prefix, then `contract-` and 64 random bits), so tests running in
/// parallel against one server never see each other's keys. The suites'
/// macros hand every behaviour its manager through this.
pub fn isolated(manager: LockManager) -> LockManager {
    let unique: u64 = rand::random();
    let prefix = format!("{}contract-{unique:016x}:", manager.prefix());
    manager.with_prefix(prefix)
}
