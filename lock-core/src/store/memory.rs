//! The in-process store: the embedded default.
//!
//! Leases live in a sharded hash table behind short, non-async mutexes; no
//! operation awaits while holding one, so every operation is effectively
//! immediate. Expiry runs on tokio's [`Instant`]: the monotonic clock, so a
//! wall-clock jump never frees or extends a lease, and under a paused test
//! clock (`#[tokio::test(start_paused = true)]`) the paused clock, so leases
//! expire in the same virtual time the test's sleeps and waits run in.
//!
//! # Memory stays bounded
//!
//! A released lease is removed at once. A lease that expires without being
//! released (its holder kept it, crashed, or overran) is removed either when
//! its key is next touched or by an amortised sweep: a shard is swept when it
//! has doubled in size since its last sweep, so each insert pays O(1) on
//! average and the table never holds more than about twice the live leases.
//!
//! # Waking waiters
//!
//! A waiter registers on the key's [`Notify`] under the same shard lock that
//! decided its attempt failed, so no release can slip in between. Each release
//! wakes one waiter (tokio hands the wakeup on if that waiter is gone), which
//! then retries; handoff therefore costs one task wakeup, not a polling period.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{AcquireRequest, Attempt, BoxFuture, LockStore, Wakeup};
use crate::{Holder, Result, token};

/// Number of shards; a power of two.
const SHARDS: usize = 32;

/// A shard is not swept below this many slots.
const MIN_SWEEP_LEN: usize = 64;

/// The longest TTL the memory store accepts: 100 years, far inside what
/// `Instant` arithmetic can represent on every supported platform.
const MAX_TTL: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// Leases kept in this process's memory: fast, needs no server, and visible
/// to this process only.
///
/// This is the store behind [`LockManager::memory`](crate::LockManager::memory)
/// and the registry's fallback manager. Cloning it is cheap and the clones
/// share the same leases.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::{LockManager, MemoryStore};
///
/// let store = MemoryStore::new();
/// let locks = LockManager::new(store.clone());
/// let guard = locks.lock("nightly-report", Duration::from_secs(60)).acquire().await?;
/// assert_eq!(store.len(), 1);
/// guard.expect("nobody else holds it").release().await?;
/// assert!(store.is_empty());
/// # Ok(()) }
/// ```
///
/// # What memory adds to [the guarantee](crate#the-guarantee-stated-honestly)
///
/// Exclusion holds between tasks and threads of one process. Two processes
/// each using a memory store do not see each other's leases:
/// [`is_shared`](LockStore::is_shared) is false, and boot-time checks can refuse
/// such a setup where cross-process exclusion is required.
#[derive(Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    hasher: hashbrown::DefaultHashBuilder,
    shards: Box<[Padded<Mutex<Shard>>]>,
    /// One fencing counter for the whole store: a value strictly greater than
    /// every earlier one is, in particular, greater than every earlier one of
    /// the same key, and a single counter costs nothing per key.
    fence: AtomicU64,
}

impl Default for Inner {
    fn default() -> Self {
        Inner {
            hasher: hashbrown::DefaultHashBuilder::default(),
            shards: (0..SHARDS)
                .map(|_| Padded(Mutex::new(Shard::default())))
                .collect(),
            fence: AtomicU64::new(0),
        }
    }
}

/// Keeps each shard's mutex on its own cache lines, so tasks working on
/// different shards do not slow each other down.
#[repr(align(128))]
struct Padded<T>(T);

struct Shard {
    slots: HashTable<Slot>,
    /// Sweep when `slots.len()` reaches this.
    sweep_at: usize,
    /// Sweeps so far; shows the amortisation in tests and `Debug`.
    sweeps: u64,
}

impl Default for Shard {
    fn default() -> Self {
        Shard {
            slots: HashTable::new(),
            sweep_at: MIN_SWEEP_LEN,
            sweeps: 0,
        }
    }
}

/// Everything the store knows about one key.
struct Slot {
    /// Shared with the `Lock` that inserted it when it could be: no copy.
    key: Arc<str>,
    lease: Option<Lease>,
    /// Present while tasks wait for this key; each holds a clone.
    waiters: Option<Arc<Notify>>,
}

struct Lease {
    token: StoredToken,
    expires: Instant,
    /// The fencing token this lease was given, or 0 for none (tokens start
    /// at 1): shown by `holder` and `list`.
    fence: u64,
}

/// An owner token as the store keeps it.
///
/// Tokens this process made end in its own `@host:pid`, so only their random
/// part needs keeping, inline: no allocation per acquire and less memory per
/// held lock. Anything else is kept whole.
enum StoredToken {
    Own([u8; token::RANDOM_HEX_LEN]),
    Other(Box<str>),
}

impl StoredToken {
    fn new(token: &str) -> StoredToken {
        match token::own_random_part(token) {
            Some(random) => StoredToken::Own(random),
            None => StoredToken::Other(token.into()),
        }
    }

    fn is(&self, token: &str) -> bool {
        match self {
            StoredToken::Own(random) => token::own_random_part(token).as_ref() == Some(random),
            StoredToken::Other(stored) => &**stored == token,
        }
    }

    fn to_token(&self) -> String {
        match self {
            StoredToken::Own(random) => token::own_token(random),
            StoredToken::Other(stored) => stored.to_string(),
        }
    }
}

impl Lease {
    fn live_at(&self, now: Instant) -> bool {
        self.expires > now
    }

    fn holder(&self, now: Instant) -> Holder {
        let holder = Holder::new(self.token.to_token(), self.expires - now);
        match self.fence {
            0 => holder,
            fence => holder.with_fence(fence),
        }
    }
}

impl Slot {
    /// The lease, if it has not expired.
    fn live_lease(&self, now: Instant) -> Option<&Lease> {
        self.lease.as_ref().filter(|lease| lease.live_at(now))
    }

    fn has_waiters(&self) -> bool {
        self.waiters
            .as_ref()
            .is_some_and(|notify| Arc::strong_count(notify) > 1)
    }

    /// A slot with no live lease and nobody waiting can be dropped.
    fn is_garbage(&self, now: Instant) -> bool {
        self.live_lease(now).is_none() && !self.has_waiters()
    }

    /// Drops the lease and wakes one waiter. Returns whether the slot is now
    /// garbage.
    fn vacate(&mut self) -> bool {
        self.lease = None;
        match &self.waiters {
            Some(notify) if Arc::strong_count(notify) > 1 => {
                notify.notify_one();
                false
            }
            _ => true,
        }
    }

    /// Registers a waiter for the next release, before the shard lock drops.
    fn wakeup(&mut self) -> Wakeup {
        let notify = self.waiters.get_or_insert_with(Default::default).clone();
        let mut notified = Box::pin(notify.notified_owned());
        notified.as_mut().enable();
        Wakeup::new(notified)
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys the store currently tracks, including leases that have
    /// expired but not yet been swept and keys tasks are waiting on.
    pub fn len(&self) -> usize {
        self.inner
            .shards
            .iter()
            .map(|s| lock(&s.0).slots.len())
            .sum()
    }

    /// How many amortised sweeps have run, over all shards.
    fn sweeps(&self) -> u64 {
        self.inner.shards.iter().map(|s| lock(&s.0).sweeps).sum()
    }

    /// True when the store tracks no key at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every expired lease now, and returns how many keys remain.
    ///
    /// Never needed for correctness or bounded memory (sweeping is automatic
    /// and amortised); useful before measuring.
    pub fn purge_expired(&self) -> usize {
        let now = Instant::now();
        self.inner
            .shards
            .iter()
            .map(|shard| {
                let mut shard = lock(&shard.0);
                shard.sweep(now);
                shard.slots.len()
            })
            .sum()
    }

    /// Runs `f` on the shard owning `key`, with the key's hash.
    fn with_shard<R>(&self, key: &str, f: impl FnOnce(&mut Shard, u64) -> R) -> R {
        let hash = self.inner.hasher.hash_one(key);
        // Middle bits pick the shard: the table itself uses the low bits for
        // the bucket and the top seven as tags, which must keep varying.
        let index = (hash >> 32) as usize & (SHARDS - 1);
        f(&mut lock(&self.inner.shards[index].0), hash)
    }

    fn try_acquire(&self, request: AcquireRequest<'_>) -> Attempt {
        // The caller's send time, on this same clock: no second reading.
        let now = request.sent;
        // The caller validated the TTL against `max_ttl`, so this cannot
        // overflow; saturate anyway rather than panic.
        let expires = now
            .checked_add(request.ttl)
            .unwrap_or_else(|| now + MAX_TTL);
        let lease = |fence: Option<u64>| Lease {
            token: StoredToken::new(request.token),
            expires,
            fence: fence.unwrap_or(0),
        };
        self.with_shard(request.key, |shard, hash| {
            let entry = shard.slots.entry(
                hash,
                |slot| &*slot.key == request.key,
                |slot| self.inner.hasher.hash_one(&*slot.key),
            );
            match entry {
                Entry::Occupied(mut occupied) => {
                    let slot = occupied.get_mut();
                    match slot.live_lease(now) {
                        None => {
                            let fence = self.next_fence(request.fenced);
                            slot.lease = Some(lease(fence));
                            Attempt::Acquired { fence }
                        }
                        Some(held) => Attempt::Held {
                            remaining: Some(held.expires - now),
                            wakeup: request.wake.then(|| slot.wakeup()),
                        },
                    }
                }
                Entry::Vacant(vacant) => {
                    let fence = self.next_fence(request.fenced);
                    vacant.insert(Slot {
                        key: request
                            .shared_key
                            .map_or_else(|| Arc::from(request.key), Arc::clone),
                        lease: Some(lease(fence)),
                        waiters: None,
                    });
                    shard.after_insert(now);
                    Attempt::Acquired { fence }
                }
            }
        })
    }

    /// The next fencing token, taken under the shard lock of the key being
    /// acquired so tokens of one key are handed out in acquisition order.
    fn next_fence(&self, fenced: bool) -> Option<u64> {
        fenced.then(|| self.inner.fence.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// Compare-and-delete; also the synchronous path for dropped guards.
    fn release_sync(&self, key: &str, token: &str) -> bool {
        let now = Instant::now();
        self.with_shard(key, |shard, hash| {
            let Ok(mut found) = shard.slots.find_entry(hash, |slot| &*slot.key == key) else {
                return false;
            };
            let slot = found.get_mut();
            let ours = slot
                .lease
                .as_ref()
                .is_some_and(|lease| lease.token.is(token));
            if !ours {
                return false;
            }
            let was_live = slot.live_lease(now).is_some();
            if slot.vacate() {
                found.remove();
            }
            was_live
        })
    }

    fn extend_sync(&self, key: &str, token: &str, ttl: Duration) -> bool {
        let now = Instant::now();
        self.with_shard(key, |shard, hash| {
            let Some(slot) = shard.slots.find_mut(hash, |slot| &*slot.key == key) else {
                return false;
            };
            match &mut slot.lease {
                Some(lease) if lease.live_at(now) && lease.token.is(token) => {
                    lease.expires = now.checked_add(ttl).unwrap_or(now + MAX_TTL);
                    true
                }
                _ => false,
            }
        })
    }

    fn force_release_sync(&self, key: &str) -> bool {
        let now = Instant::now();
        self.with_shard(key, |shard, hash| {
            let Ok(mut found) = shard.slots.find_entry(hash, |slot| &*slot.key == key) else {
                return false;
            };
            let slot = found.get_mut();
            let was_live = slot.live_lease(now).is_some();
            if slot.vacate() {
                found.remove();
            }
            was_live
        })
    }

    fn holder_sync(&self, key: &str) -> Option<Holder> {
        let now = Instant::now();
        self.with_shard(key, |shard, hash| {
            let slot = shard.slots.find(hash, |slot| &*slot.key == key)?;
            slot.live_lease(now).map(|lease| lease.holder(now))
        })
    }

    /// Every live lease whose key starts with `prefix`, one shard at a time:
    /// each shard is read under its lock, so every lease shown was live at
    /// the moment its shard was read.
    fn list_sync(&self, prefix: &str) -> Vec<(String, Holder)> {
        let now = Instant::now();
        let mut held = Vec::new();
        for shard in &self.inner.shards {
            let shard = lock(&shard.0);
            held.extend(shard.slots.iter().filter_map(|slot| {
                let lease = slot.live_lease(now)?;
                slot.key
                    .starts_with(prefix)
                    .then(|| (slot.key.to_string(), lease.holder(now)))
            }));
        }
        held
    }
}

impl Shard {
    /// Amortised sweep: once the shard has doubled since its last sweep.
    fn after_insert(&mut self, now: Instant) {
        if self.slots.len() >= self.sweep_at {
            self.sweep(now);
        }
    }

    fn sweep(&mut self, now: Instant) {
        self.slots.retain(|slot| !slot.is_garbage(now));
        self.sweep_at = (self.slots.len() * 2).max(MIN_SWEEP_LEN);
        self.sweeps += 1;
    }
}

/// A poisoned shard only means a panic elsewhere while it was held; every
/// operation leaves the shard consistent before it can panic, so carry on.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

impl LockStore for MemoryStore {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        let attempt = self.try_acquire(request);
        Box::pin(std::future::ready(Ok(attempt)))
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        let released = self.release_sync(key, token);
        Box::pin(std::future::ready(Ok(released)))
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        let extended = self.extend_sync(key, token, ttl);
        Box::pin(std::future::ready(Ok(extended)))
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        let released = self.force_release_sync(key);
        Box::pin(std::future::ready(Ok(released)))
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        let holder = self.holder_sync(key);
        Box::pin(std::future::ready(Ok(holder)))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        let held = self.list_sync(prefix);
        Box::pin(std::future::ready(Ok(held)))
    }

    fn name(&self) -> &'static str {
        "memory"
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn max_ttl(&self) -> Duration {
        MAX_TTL
    }

    fn fencing(&self) -> bool {
        true
    }

    /// Zero: leases expire on this process's own (tokio) clock, the one the
    /// runtime's deadlines are counted on, so there is no drift to allow for.
    fn clock_margin(&self, _ttl: Duration) -> Duration {
        Duration::ZERO
    }

    fn acquire_now(&self, request: AcquireRequest<'_>) -> Option<Result<Attempt>> {
        Some(Ok(self.try_acquire(request)))
    }

    fn release_now(&self, key: &str, token: &str) -> Option<Result<bool>> {
        Some(Ok(self.release_sync(key, token)))
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("keys", &self.len())
            .field("sweeps", &self.sweeps())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    fn acquire(store: &MemoryStore, key: &str, token: &str, ttl: Duration) -> Attempt {
        store.try_acquire(AcquireRequest::new(key, token, ttl))
    }

    #[test]
    fn extend_is_one_compare_and_expire_under_the_shard_lock() {
        // Extend must not be get-then-put: a stale holder extending must never
        // touch a lease that has passed to someone else.
        let store = MemoryStore::new();
        assert!(matches!(
            acquire(&store, "k", "a", Duration::from_millis(1)),
            Attempt::Acquired { .. }
        ));
        std::thread::sleep(Duration::from_millis(5));
        assert!(matches!(
            acquire(&store, "k", "b", TTL),
            Attempt::Acquired { .. }
        ));
        assert!(
            !store.extend_sync("k", "a", TTL),
            "a stale token must not extend"
        );
        let holder = store.holder_sync("k").expect("b still holds it");
        assert_eq!(holder.token(), "b", "the new holder's lease is untouched");
    }

    #[test]
    fn sweeping_is_amortised_not_a_scan_per_insert() {
        // A full scan on every insert would make each acquire O(n); sweeping
        // only when a shard doubles keeps the total scan work linear.
        let store = MemoryStore::new();
        let inserts = 100_000;
        for i in 0..inserts {
            let key = format!("k{i}");
            assert!(matches!(
                acquire(&store, &key, "t", TTL),
                Attempt::Acquired { .. }
            ));
        }
        let sweeps = store.sweeps();
        // Each shard holds about 3,125 keys and sweeps at 64, 128, ... 2,048.
        assert!(
            sweeps <= (SHARDS as u64) * 8,
            "{sweeps} sweeps for {inserts} inserts is not amortised"
        );
        assert_eq!(store.len(), inserts, "live leases are never swept");
    }

    #[test]
    fn a_slot_stays_while_someone_waits_and_goes_when_they_leave() {
        let store = MemoryStore::new();
        assert!(matches!(
            acquire(&store, "k", "a", TTL),
            Attempt::Acquired { .. }
        ));
        let Attempt::Held { wakeup, .. } =
            store.try_acquire(AcquireRequest::new("k", "b", TTL).waking())
        else {
            panic!("k is held by a");
        };
        let wakeup = wakeup.expect("memory store can observe releases");
        assert!(store.release_sync("k", "a"));
        assert_eq!(store.len(), 1, "the waiter keeps the slot alive");
        drop(wakeup);
        assert_eq!(store.purge_expired(), 0, "an abandoned slot is swept");
    }
}
