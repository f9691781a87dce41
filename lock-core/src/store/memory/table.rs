//! The memory store's table: each key's lease and waiters, in shards, swept as leases expire.

use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use hashbrown::HashTable;
use tokio::time::Instant;

use super::lease::Lease;
use super::queue::{Grant, Queue, Waiter};
use super::readers::Readers;
use super::token::StoredToken;
use crate::store::{AcquireRequest, Wakeup, Woken};

/// Number of shards; a power of two.
const SHARDS: usize = 32;

/// A shard is not swept below this many slots.
const MIN_SWEEP_LEN: usize = 64;

/// The longest TTL the memory store accepts: the toolkit's 100 years, far
/// inside what `Instant` arithmetic can represent on every supported
/// platform.
pub(super) use crate::store::kit::MAX_TTL;

/// Every key the store knows, by shard.
pub(super) struct Table {
    hasher: hashbrown::DefaultHashBuilder,
    shards: Box<[Padded<Mutex<Shard>>]>,
    /// One fencing counter for the whole store: a value strictly greater than
    /// every earlier one is, in particular, greater than every earlier one of
    /// the same key, and a single counter costs nothing per key.
    pub(super) fence: AtomicU64,
}

impl Default for Table {
    fn default() -> Self {
        Table {
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

pub(super) struct Shard {
    pub(super) slots: HashTable<Slot>,
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
pub(super) struct Slot {
    /// Shared with the `Lock` that inserted it when it could be: no copy.
    pub(super) key: Arc<str>,
    /// The writer's lease (a plain lock's).
    pub(super) lease: Option<Lease>,
    /// The readers' leases ([`Lock::read`](crate::Lock::read)), made when
    /// the first reader comes: boxed, as most keys never have one.
    pub(super) readers: Option<Box<Readers>>,
    /// The tasks waiting for this key, first come first (a waiter leaves
    /// when it goes away); made when the first one comes, and kept while
    /// the slot lives, so a busy key does not make and free its queue again
    /// and again. Boxed: most keys never have a waiter, and a held lock's
    /// slot stays one pointer larger instead of four.
    waiters: Option<Box<Queue>>,
}

impl Slot {
    /// A slot for `key` holding `lease`, with nobody waiting.
    #[inline]
    pub(super) fn new(key: Arc<str>, lease: Lease) -> Slot {
        Slot {
            key,
            lease: Some(lease),
            readers: None,
            waiters: None,
        }
    }

    /// A slot for `key` held by one reader, under `lease`.
    pub(super) fn new_reader(key: Arc<str>, lease: Lease, now: Instant) -> Slot {
        let mut slot = Slot {
            key,
            lease: None,
            readers: None,
            waiters: None,
        };
        slot.take(true, lease, now);
        slot
    }

    /// Whether any reader's lease is live at `now`.
    #[inline]
    pub(super) fn readers_live(&self, now: Instant) -> bool {
        self.readers
            .as_ref()
            .is_some_and(|readers| readers.any_live(now))
    }

    /// Whether nobody holds the key at `now`, writer or reader.
    #[inline]
    pub(super) fn is_free(&self, now: Instant) -> bool {
        self.live_lease(now).is_none() && !self.readers_live(now)
    }

    /// Whether an attempt, a reader's when `read`, can have the key at
    /// `now`: a writer when nobody holds it; a reader when no writer holds
    /// it and none waits (writers are never starved by readers).
    #[inline]
    pub(super) fn admits(&self, read: bool, now: Instant) -> bool {
        if read {
            self.live_lease(now).is_none()
                && !self
                    .waiters
                    .as_ref()
                    .is_some_and(|queue| queue.has_writer())
        } else {
            self.is_free(now)
        }
    }

    /// Writes `lease`, a reader's when `read`, for an attempt this slot
    /// [`admits`](Slot::admits): what is left of leases that have expired
    /// goes.
    #[inline]
    pub(super) fn take(&mut self, read: bool, lease: Lease, now: Instant) {
        if read {
            self.lease = None;
            self.readers.get_or_insert_default().add(lease, now);
        } else {
            self.lease = Some(lease);
            self.readers = None;
        }
    }

    /// How long the key stays held against an attempt it did not admit,
    /// unless released first: the writer's lease, or the last reader's.
    /// Zero when only a waiting writer holds a reader off: it takes the key
    /// as soon as it tries again.
    pub(super) fn blocked_for(&self, now: Instant) -> Duration {
        let until = match self.live_lease(now) {
            Some(writer) => Some(writer.expires),
            None => self
                .readers
                .as_ref()
                .and_then(|readers| readers.last_expiry(now)),
        };
        until.map_or(Duration::ZERO, |until| until - now)
    }

    /// Gives back the lease of the reader whose token is `token`, if it has
    /// one here; the last live reader to go hands the key on. Returns
    /// whether that lease was still live, and the waker to wake.
    #[cold]
    pub(super) fn release_reader(
        &mut self,
        token: &str,
        now: Instant,
        fences: &AtomicU64,
    ) -> (bool, Option<Waker>) {
        let Some(lease) = self
            .readers
            .as_mut()
            .and_then(|readers| readers.remove(token))
        else {
            return (false, None);
        };
        (lease.live_at(now), self.hand_on(now, fences, false))
    }

    /// The lease, if it has not expired.
    #[inline]
    pub(super) fn live_lease(&self, now: Instant) -> Option<&Lease> {
        self.lease.as_ref().filter(|lease| lease.live_at(now))
    }

    fn has_waiters(&self) -> bool {
        self.waiters.as_ref().is_some_and(|queue| !queue.is_empty())
    }

    /// A slot with no live lease and nobody waiting can be dropped.
    pub(super) fn is_garbage(&self, now: Instant) -> bool {
        self.is_free(now) && !self.has_waiters()
    }

    /// Drops the lease and hands the key on (see [`hand_on`](Slot::hand_on)).
    /// Returns the waiter's waker, and whether the slot can go: without a
    /// waiter, it holds nothing any more.
    #[inline]
    pub(super) fn vacate(&mut self, now: Instant, fences: &AtomicU64) -> (Option<Waker>, bool) {
        self.lease = None;
        if !self.has_waiters() {
            return (None, !self.readers_live(now));
        }
        (self.hand_on(now, fences, false), false)
    }

    /// Takes the first waiter off the queue, for a key whose lease is gone,
    /// and returns its waker, to wake once the shard lock is dropped. A
    /// lease handed to it in turn ([`Queue::take_first`]) is written here,
    /// under the waiter's token, before the shard lock drops.
    ///
    /// Only when the first waiter could have the key now (see
    /// [`admits`](Slot::admits)): a writer once nobody holds it, readers
    /// once no writer does.
    pub(super) fn hand_on(
        &mut self,
        now: Instant,
        fences: &AtomicU64,
        passed_on: bool,
    ) -> Option<Waker> {
        let writer_live = self.live_lease(now).is_some();
        let readers_live = self.readers_live(now);
        let queue = self.waiters.as_mut()?;
        let admissible = match queue.first_is_reader() {
            None => false,
            Some(true) => !writer_live,
            Some(false) => !writer_live && !readers_live,
        };
        if !admissible {
            return None;
        }
        let (lease, readers) = (&mut self.lease, &mut self.readers);
        queue.take_first(now, passed_on, |grant, reader| {
            let fence = if reader {
                None
            } else {
                next_fence(fences, grant.fenced)
            };
            let granted = Lease {
                token: grant.token.clone(),
                expires: expiry(now, grant.ttl),
                fence: fence.unwrap_or(0),
            };
            if reader {
                readers.get_or_insert_default().add(granted, now);
            } else {
                *lease = Some(granted);
            }
            Woken::Granted { fence, since: now }
        })
    }

    /// Queues the attempt `request` to wait for the key, before the shard
    /// lock drops.
    pub(super) fn wakeup(&mut self, table: &Arc<Table>, request: &AcquireRequest<'_>) -> Wakeup {
        let queue = self
            .waiters
            .get_or_insert_with(|| Box::new(Queue::new(request.sent)));
        let waiter = queue.push(
            request.read,
            request.local.grant.then(|| Grant {
                token: StoredToken::new(request.token),
                ttl: request.ttl,
                fenced: request.fenced,
            }),
        );
        Wakeup::reporting(Queued {
            table: Arc::clone(table),
            key: Arc::clone(&self.key),
            waiter,
        })
    }

    /// Whether the first in the queue waits for the read side.
    fn reader_waits_first(&self) -> bool {
        self.waiters
            .as_ref()
            .and_then(|queue| queue.first_is_reader())
            .unwrap_or(false)
    }

    /// Takes `waiter` off the queue, if it is still on it.
    fn leave(&mut self, waiter: &Arc<Waiter>) {
        if let Some(queue) = &mut self.waiters {
            queue.leave(waiter);
        }
    }
}

/// A waiter's side of the queue: resolves when a release takes it off.
struct Queued {
    table: Arc<Table>,
    key: Arc<str>,
    waiter: Arc<Waiter>,
}

impl Future for Queued {
    type Output = Woken;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Woken> {
        self.waiter.poll_woken(cx)
    }
}

impl Drop for Queued {
    /// Leaves the queue, or, when a release took this waiter off it and the
    /// waiting task never saw that, passes on what the release gave: the
    /// lease it was handed goes back (and on to the next in line), and a
    /// wake-up to try again goes to the next waiter while the key is free.
    fn drop(&mut self) {
        if self.waiter.seen() {
            return;
        }
        let now = Instant::now();
        let fences = &self.table.fence;
        self.table.with_shard_waking(&self.key, |shard, hash| {
            let Ok(mut found) = shard.slots.find_entry(hash, |slot| slot.key == self.key) else {
                return ((), None);
            };
            let slot = found.get_mut();
            let waker = match self.waiter.woken() {
                None => {
                    slot.leave(&self.waiter);
                    // A writer that stops waiting no longer holds off the
                    // readers queued behind it.
                    if !self.waiter.is_reader() && slot.reader_waits_first() {
                        slot.hand_on(now, fences, true)
                    } else {
                        None
                    }
                }
                Some(Woken::Granted { .. }) => {
                    let Some(token) = self.waiter.grant_token() else {
                        return ((), None);
                    };
                    let ours = if self.waiter.is_reader() {
                        slot.readers
                            .as_mut()
                            .is_some_and(|readers| readers.remove_stored(token))
                    } else {
                        let ours = slot
                            .lease
                            .as_ref()
                            .is_some_and(|lease| lease.token == *token);
                        if ours {
                            slot.lease = None;
                        }
                        ours
                    };
                    if ours {
                        slot.hand_on(now, fences, true)
                    } else {
                        None
                    }
                }
                Some(Woken::Released) => slot.hand_on(now, fences, true),
            };
            if slot.is_garbage(now) {
                found.remove();
            }
            ((), waker)
        });
    }
}

/// When a lease of `ttl` taken at `now` ends. Callers validated the TTL
/// against `max_ttl`, so this cannot overflow; saturate anyway rather than
/// panic.
#[inline]
pub(super) fn expiry(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl).unwrap_or_else(|| now + MAX_TTL)
}

/// The next fencing token, when asked for one: taken under the shard lock of
/// the key being acquired, so tokens of one key are handed out in
/// acquisition order.
#[inline]
pub(super) fn next_fence(fences: &AtomicU64, fenced: bool) -> Option<u64> {
    fenced.then(|| fences.fetch_add(1, Ordering::Relaxed) + 1)
}

impl Table {
    /// `key`'s hash, as the table files it.
    #[inline]
    pub(super) fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Runs `f` on the shard owning `key`, with the key's hash.
    #[inline]
    pub(super) fn with_shard<R>(&self, key: &str, f: impl FnOnce(&mut Shard, u64) -> R) -> R {
        let hash = self.hash(key);
        // Middle bits pick the shard: the table itself uses the low bits for
        // the bucket and the top seven as tags, which must keep varying.
        let index = (hash >> 32) as usize & (SHARDS - 1);
        f(&mut lock(&self.shards[index].0), hash)
    }

    /// [`with_shard`](Table::with_shard) for an operation that may take a
    /// waiter off the queue: `f` returns that waiter's waker with its
    /// result, and it is woken once the shard lock is dropped.
    #[inline]
    pub(super) fn with_shard_waking<R>(
        &self,
        key: &str,
        f: impl FnOnce(&mut Shard, u64) -> (R, Option<Waker>),
    ) -> R {
        let (result, waker) = self.with_shard(key, f);
        if let Some(waker) = waker {
            waker.wake();
        }
        result
    }

    /// Each shard in turn, locked while it is looked at.
    pub(super) fn shards(&self) -> impl Iterator<Item = MutexGuard<'_, Shard>> {
        self.shards.iter().map(|shard| lock(&shard.0))
    }

    /// Number of keys tracked, live or not.
    pub(super) fn len(&self) -> usize {
        self.shards().map(|shard| shard.slots.len()).sum()
    }

    /// How many amortised sweeps have run, over all shards.
    pub(super) fn sweeps(&self) -> u64 {
        self.shards().map(|shard| shard.sweeps).sum()
    }

    /// Sweeps every shard now; returns how many keys remain.
    pub(super) fn purge_expired(&self) -> usize {
        let now = Instant::now();
        self.shards()
            .map(|mut shard| {
                shard.sweep(now);
                shard.slots.len()
            })
            .sum()
    }
}

impl Shard {
    /// Amortised sweep: once the shard has doubled since its last sweep.
    #[inline]
    pub(super) fn after_insert(&mut self, now: Instant) {
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
#[inline]
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::super::MemoryStore;
    use super::super::tests::{TTL, acquire};
    use super::*;
    use crate::store::Attempt;

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
}
