//! The checks every store makes on what it is given: a key that names
//! something, and a TTL the store can keep, rounded the way the runtime
//! rounds it.
//!
//! The runtime checks both before a request reaches a store, so a store
//! behind a [`LockManager`](crate::LockManager) never sees an empty key or
//! a TTL out of its range. A store is also a public type that can be
//! called directly, though: these are the same checks, for it to make at
//! its own door, with the same messages.

use std::time::Duration;

use crate::store::LockStore;
use crate::{Error, Result};

/// The longest TTL a store that keeps time in milliseconds or seconds
/// accepts: 100 years. It outlives anything a lease protects, and stays far
/// inside what every clock and every server's expiry arithmetic can
/// represent, so a deadline computed from it never overflows.
pub const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Refuses an empty key with [`Error::InvalidName`]: a lease must name
/// what it protects.
///
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use lock_core::store::kit::check_key;
///
/// assert!(check_key("lock:reports").is_ok());
/// assert!(check_key("").is_err());
/// ```
pub fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::InvalidName {
            name: String::new(),
            reason: "a lock key must not be empty; give the lock a name",
        });
    }
    Ok(())
}

/// Checks a lease's key and TTL, as a store's `acquire` and `extend` do
/// at their door: [`check_key`], then [`validate_ttl`]. The runtime has
/// made both checks already; a direct caller of the store has not, and
/// must get the same errors, never a panic in the store's expiry
/// arithmetic or a lease it cannot keep.
///
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use std::time::Duration;
/// use lock_core::MemoryStore;
/// use lock_core::store::kit::check_lease;
///
/// let store = MemoryStore::new();
/// assert!(check_lease("lock:a", Duration::from_secs(30), &store).is_ok());
/// assert!(check_lease("lock:a", Duration::MAX, &store).is_err());
/// assert!(check_lease("", Duration::from_secs(30), &store).is_err());
/// ```
#[inline]
pub fn check_lease(key: &str, ttl: Duration, store: &dyn LockStore) -> Result<()> {
    check_key(key)?;
    validate_ttl(key, ttl, store)
}

/// Checks a TTL against zero and `store`'s range ([`LockStore::min_ttl`],
/// [`LockStore::max_ttl`]), as the store will keep it: rounded up to its
/// resolution ([`store_ttl`]), so 1.5 s on a store that keeps whole seconds
/// from 2 s is 2 s, and accepted. A refused TTL is
/// [`Error::InvalidTtl`], saying which bound it broke.
///
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use std::time::Duration;
/// use lock_core::MemoryStore;
/// use lock_core::store::kit::validate_ttl;
///
/// let store = MemoryStore::new();
/// assert!(validate_ttl("lock:a", Duration::from_secs(30), &store).is_ok());
/// assert!(validate_ttl("lock:a", Duration::ZERO, &store).is_err());
/// ```
#[inline]
pub fn validate_ttl(key: &str, ttl: Duration, store: &dyn LockStore) -> Result<()> {
    let (min, max) = (store.min_ttl(), store.max_ttl());
    let kept = store_ttl(ttl, store);
    if !ttl.is_zero() && kept >= min && kept <= max {
        return Ok(());
    }
    Err(invalid_ttl(key, ttl, min, max))
}

/// Why `ttl` is refused; out of line, so the check above stays small on the
/// path every acquire takes.
#[cold]
#[inline(never)]
fn invalid_ttl(key: &str, ttl: Duration, min: Duration, max: Duration) -> Error {
    let reason = if ttl.is_zero() {
        "a zero ttl expires at once; give the longest time the work may take, \
         for example 30s"
            .to_owned()
    } else if ttl < min {
        format!("the store keeps leases for at least {min:?}; use a ttl of at least that")
    } else {
        format!("the store keeps leases for at most {max:?}; use a shorter ttl")
    };
    Error::InvalidTtl {
        key: key.to_owned(),
        ttl,
        reason,
    }
}

/// `ttl` rounded up to a whole multiple of `store`'s resolution
/// ([`LockStore::ttl_resolution`]): what the store is asked to keep, never
/// less than what the caller asked for.
///
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use std::time::Duration;
/// use lock_core::MemoryStore;
/// use lock_core::store::kit::store_ttl;
///
/// // The memory store keeps whole milliseconds.
/// let kept = store_ttl(Duration::from_micros(1500), &MemoryStore::new());
/// assert_eq!(kept, Duration::from_millis(2));
/// ```
#[inline]
pub fn store_ttl(ttl: Duration, store: &dyn LockStore) -> Duration {
    // Whole seconds, what TTLs almost always are, are a whole multiple of
    // any resolution up to a second: no store to ask, nothing to round.
    if ttl.subsec_nanos() == 0 {
        return ttl;
    }
    round_up(ttl, store.ttl_resolution())
}

fn round_up(ttl: Duration, resolution: Duration) -> Duration {
    // The common case, whole milliseconds (or any step dividing a second),
    // in 32-bit arithmetic: this runs on every acquire.
    let sub_second = resolution.as_secs() == 0 && resolution.subsec_nanos() > 0;
    if sub_second && 1_000_000_000 % resolution.subsec_nanos() == 0 {
        let step = resolution.subsec_nanos();
        let over = ttl.subsec_nanos() % step;
        return if over == 0 {
            ttl
        } else {
            ttl.saturating_add(Duration::from_nanos(u64::from(step - over)))
        };
    }
    let step = resolution.as_nanos();
    if step == 0 {
        return ttl;
    }
    let over = ttl.as_nanos() % step;
    if over == 0 {
        return ttl;
    }
    // `step - over` is below the resolution, which fits in u64 nanoseconds
    // for any resolution under 584 years.
    match u64::try_from(step - over) {
        Ok(short) => ttl.saturating_add(Duration::from_nanos(short)),
        Err(_) => ttl,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;

    #[test]
    fn a_ttl_is_checked_against_zero_and_the_store_range() {
        let store = MemoryStore::new();
        assert!(validate_ttl("k", Duration::from_secs(1), &store).is_ok());
        assert!(matches!(
            validate_ttl("k", Duration::ZERO, &store),
            Err(Error::InvalidTtl { .. })
        ));
        assert!(matches!(
            validate_ttl("k", store.max_ttl() + Duration::from_secs(1), &store),
            Err(Error::InvalidTtl { .. })
        ));
    }

    // Rounding down would let a store keep a lease shorter than asked.
    #[test]
    fn a_ttl_is_rounded_up_to_the_resolution_never_down() {
        let ms = Duration::from_millis(1);
        assert_eq!(round_up(Duration::from_micros(1), ms), ms);
        assert_eq!(round_up(Duration::from_micros(1001), ms), 2 * ms);
        assert_eq!(round_up(Duration::from_secs(3), ms), Duration::from_secs(3));
        assert_eq!(
            round_up(Duration::from_millis(1500), Duration::from_secs(1)),
            Duration::from_secs(2),
            "a store keeping whole seconds"
        );
        assert_eq!(round_up(Duration::MAX, ms), Duration::MAX, "saturates");
        assert_eq!(round_up(ms, Duration::ZERO), ms, "no resolution");
    }
}
