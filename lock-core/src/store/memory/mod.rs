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
//! A waiter joins the key's queue under the same shard lock that decided its
//! attempt failed, so no release can slip in between. Each release takes the
//! first waiter off the queue. A [`Lock`](crate::Lock) waiting on one permit
//! is handed the lease in turn (see [`FAIR_EVERY`](queue::FAIR_EVERY)): the
//! lease is written under the waiter's token before the shard lock drops,
//! and the waiter is woken after, to find the lease already its own: one
//! task wake-up, with no second attempt and nothing for another task to
//! barge in on. Between turns, and for other waiters (a semaphore's, a
//! direct store caller's), the first waiter is woken to try again. Wakers
//! are only ever woken after the shard lock drops, so a woken waiter never
//! finds it taken.
//!
//! A waiter that goes away leaves the queue; one that goes away after it was
//! handed the lease, before it saw so, gives the lease back, which hands it
//! on to the next in line. No lease is left behind either way.

mod lease;
mod queue;
mod readers;
mod table;
mod token;
pub(crate) mod url;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use hashbrown::hash_table::Entry;
use tokio::time::Instant;

use self::lease::Lease;
use self::table::{MAX_TTL, Slot, Table, expiry, next_fence};
use self::token::StoredToken;
use super::kit::check_lease;
use super::{AcquireRequest, Attempt, BoxFuture, LockStore};
use crate::{Holder, Result};

/// Leases kept in this process's memory: fast, needs no server, and visible
/// to this process only.
///
/// This is the store behind [`LockManager::memory`](crate::LockManager::memory),
/// which an application that runs as one process installs as its default
/// manager. Cloning it is cheap and the clones
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
    table: Arc<Table>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys the store currently tracks, including leases that have
    /// expired but not yet been swept and keys tasks are waiting on.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// How many amortised sweeps have run, over all shards.
    fn sweeps(&self) -> u64 {
        self.table.sweeps()
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
        self.table.purge_expired()
    }

    fn try_acquire(&self, request: AcquireRequest<'_>) -> Attempt {
        // The caller's send time, on this same clock: no second reading.
        let now = request.sent;
        let expires = expiry(now, request.ttl);
        let lease = |fence: Option<u64>| Lease {
            token: StoredToken::new(request.token),
            expires,
            fence: fence.unwrap_or(0),
        };
        // A waker to wake once the shard lock drops: only ever for a reader
        // held off by a waiting writer alone (below).
        let mut deferred = None;
        let attempt = self.table.with_shard(request.key, |shard, hash| {
            let entry = shard.slots.entry(
                hash,
                |slot| &*slot.key == request.key,
                |slot| self.table.hash(&slot.key),
            );
            match entry {
                Entry::Occupied(mut occupied) => {
                    let slot = occupied.get_mut();
                    if slot.admits(request.read, now) {
                        let fence = next_fence(&self.table.fence, request.fenced);
                        slot.take(request.read, lease(fence), now);
                        Attempt::Acquired { fence }
                    } else {
                        let held = Attempt::Held {
                            remaining: Some(slot.blocked_for(now)),
                            wakeup: request.wake.then(|| slot.wakeup(&self.table, &request)),
                        };
                        // A reader held off by a waiting writer alone, on a
                        // key nobody holds: that writer must hear so.
                        if request.read && slot.is_free(now) {
                            deferred = slot.hand_on(now, &self.table.fence, true);
                        }
                        held
                    }
                }
                Entry::Vacant(vacant) => {
                    let fence = next_fence(&self.table.fence, request.fenced);
                    let key = request
                        .local
                        .shared_key
                        .map_or_else(|| Arc::from(request.key), Arc::clone);
                    vacant.insert(if request.read {
                        Slot::new_reader(key, lease(fence), now)
                    } else {
                        Slot::new(key, lease(fence))
                    });
                    shard.after_insert(now);
                    Attempt::Acquired { fence }
                }
            }
        });
        if let Some(waker) = deferred {
            waker.wake();
        }
        attempt
    }

    /// Compare-and-delete; also the synchronous path for dropped guards.
    fn release_sync(&self, key: &str, token: &str) -> bool {
        let now = Instant::now();
        self.table.with_shard_waking(key, |shard, hash| {
            let Ok(mut found) = shard.slots.find_entry(hash, |slot| &*slot.key == key) else {
                return (false, None);
            };
            let slot = found.get_mut();
            let ours = slot
                .lease
                .as_ref()
                .is_some_and(|lease| lease.token.is(token));
            if !ours {
                if slot.readers.is_none() {
                    return (false, None);
                }
                let released = slot.release_reader(token, now, &self.table.fence);
                if slot.is_garbage(now) {
                    found.remove();
                }
                return released;
            }
            let was_live = slot.live_lease(now).is_some();
            let (waker, vacant) = slot.vacate(now, &self.table.fence);
            if vacant {
                found.remove();
            }
            (was_live, waker)
        })
    }

    fn extend_sync(&self, key: &str, token: &str, ttl: Duration) -> bool {
        let now = Instant::now();
        self.table.with_shard(key, |shard, hash| {
            let Some(slot) = shard.slots.find_mut(hash, |slot| &*slot.key == key) else {
                return false;
            };
            let writer = slot
                .lease
                .as_ref()
                .is_some_and(|lease| lease.token.is(token));
            let lease = if writer {
                slot.lease.as_mut()
            } else {
                slot.readers
                    .as_mut()
                    .and_then(|readers| readers.find_mut(token))
            };
            match lease {
                Some(lease) if lease.live_at(now) => {
                    lease.expires = expiry(now, ttl);
                    true
                }
                _ => false,
            }
        })
    }

    fn force_release_sync(&self, key: &str) -> bool {
        let now = Instant::now();
        self.table.with_shard_waking(key, |shard, hash| {
            let Ok(mut found) = shard.slots.find_entry(hash, |slot| &*slot.key == key) else {
                return (false, None);
            };
            let slot = found.get_mut();
            let was_live = !slot.is_free(now);
            slot.readers = None;
            let (waker, vacant) = slot.vacate(now, &self.table.fence);
            if vacant {
                found.remove();
            }
            (was_live, waker)
        })
    }

    fn holder_sync(&self, key: &str) -> Option<Holder> {
        let now = Instant::now();
        self.table.with_shard(key, |shard, hash| {
            let slot = shard.slots.find(hash, |slot| &*slot.key == key)?;
            match slot.live_lease(now) {
                Some(writer) => Some(writer.holder(now)),
                // Readers only: the one whose lease ends first.
                None => slot
                    .readers
                    .as_ref()?
                    .live(now)
                    .min_by_key(|lease| lease.expires)
                    .map(|lease| lease.holder_as(now, true)),
            }
        })
    }

    /// Whether `token` holds a live lease on `key`, as its writer or as one
    /// of its readers: one look in `key`'s shard.
    fn held_by_sync(&self, key: &str, token: &str) -> bool {
        let now = Instant::now();
        self.table.with_shard(key, |shard, hash| {
            shard
                .slots
                .find(hash, |slot| &*slot.key == key)
                .is_some_and(|slot| {
                    slot.live_lease(now)
                        .is_some_and(|lease| lease.token.is(token))
                        || slot.readers.as_ref().is_some_and(|readers| {
                            readers.live(now).any(|lease| lease.token.is(token))
                        })
                })
        })
    }

    /// Every live lease whose key starts with `prefix`, one shard at a time:
    /// each shard is read under its lock, so every lease shown was live at
    /// the moment its shard was read.
    fn list_sync(&self, prefix: &str) -> Vec<(String, Holder)> {
        let now = Instant::now();
        let mut held = Vec::new();
        for shard in self.table.shards() {
            for slot in shard.slots.iter() {
                if !slot.key.starts_with(prefix) {
                    continue;
                }
                let writer = slot.live_lease(now).map(|lease| lease.holder(now));
                let readers = slot
                    .readers
                    .iter()
                    .flat_map(|readers| readers.live(now).map(|lease| lease.holder_as(now, true)));
                held.extend(
                    writer
                        .into_iter()
                        .chain(readers)
                        .map(|holder| (slot.key.to_string(), holder)),
                );
            }
        }
        held
    }
}

impl MemoryStore {
    /// An acquire, its key and TTL checked first: the runtime has checked
    /// them, a direct caller may not have.
    #[inline]
    fn acquire_checked(&self, request: AcquireRequest<'_>) -> Result<Attempt> {
        // Every acquire passes here, the runtime's included: what is
        // plainly fine (a key, and a TTL of whole milliseconds within
        // range, kept as given) costs three comparisons; the rest gets the
        // full check and its message.
        let plain = !request.key.is_empty()
            && !request.ttl.is_zero()
            && request.ttl <= MAX_TTL
            && request.ttl.subsec_nanos() % 1_000_000 == 0;
        if !plain {
            check_lease(request.key, request.ttl, self)?;
        }
        Ok(self.try_acquire(request))
    }
}

impl LockStore for MemoryStore {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        let attempt = self.acquire_checked(request);
        Box::pin(std::future::ready(attempt))
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
        let extended = check_lease(key, ttl, self).map(|()| self.extend_sync(key, token, ttl));
        Box::pin(std::future::ready(extended))
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        let released = self.force_release_sync(key);
        Box::pin(std::future::ready(Ok(released)))
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        let holder = self.holder_sync(key);
        Box::pin(std::future::ready(Ok(holder)))
    }

    fn is_held_by<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(std::future::ready(Ok(self.held_by_sync(key, token))))
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

    fn read_mode(&self) -> bool {
        true
    }

    /// Zero: leases expire on this process's own (tokio) clock, the one the
    /// runtime's deadlines are counted on, so there is no drift to allow for.
    fn clock_margin(&self, _ttl: Duration) -> Duration {
        Duration::ZERO
    }

    fn acquire_now(&self, request: AcquireRequest<'_>) -> Option<Result<Attempt>> {
        Some(self.acquire_checked(request))
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

    pub(super) const TTL: Duration = Duration::from_secs(30);

    /// Attempts `key` under `token` for `ttl`, not waiting.
    pub(super) fn acquire(store: &MemoryStore, key: &str, token: &str, ttl: Duration) -> Attempt {
        store.try_acquire(AcquireRequest::new(key, token, ttl))
    }

    #[test]
    fn extend_is_one_compare_and_expire_under_the_shard_lock() {
        // Extend must not be get-then-put: a stale holder extending must never
        // touch a lease that has passed to someone else.
        let store = held_by_a(Duration::from_millis(1));
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

    /// A store where "a" holds "k" for `ttl`.
    pub(super) fn held_by_a(ttl: Duration) -> MemoryStore {
        let store = MemoryStore::new();
        assert!(matches!(
            acquire(&store, "k", "a", ttl),
            Attempt::Acquired { .. }
        ));
        store
    }
}
