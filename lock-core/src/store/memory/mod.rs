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
//! is handed the lease in turn (see [`FAIR_EVERY`]): the lease is written
//! under the waiter's token before the shard lock drops, and the waiter is
//! woken after, to find the lease already its own: one task wake-up, with no
//! second attempt and nothing for another task to barge in on. Between turns,
//! and for other waiters (a semaphore's, a direct store caller's), the first
//! waiter is woken to try again. Wakers are only ever woken after the shard
//! lock drops, so a woken waiter never finds it taken.
//!
//! A waiter that goes away leaves the queue; one that goes away after it was
//! handed the lease, before it saw so, gives the lease back, which hands it
//! on to the next in line. No lease is left behind either way.

pub(crate) mod url;

use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use tokio::time::Instant;

use super::{AcquireRequest, Attempt, BoxFuture, LockStore, Wakeup, Woken};
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
    /// The tasks waiting for this key, first come first (a waiter leaves
    /// when it goes away); made when the first one comes, and kept while
    /// the slot lives, so a busy key does not make and free its queue again
    /// and again. Boxed: most keys never have a waiter, and a held lock's
    /// slot stays one pointer larger instead of four.
    waiters: Option<Box<Queue>>,
}

/// A key's waiters, first come first.
struct Queue {
    waiters: VecDeque<Arc<Waiter>>,
    /// From when the next release hands the lease to the first waiter
    /// rather than waking it to try again (see [`Slot::hand_on`]).
    fair_at: Instant,
}

/// How often, at most, a key's release hands the lease over in turn while
/// a stream of releases finds waiters queued. In between, a waiter is woken
/// to try again and a running task may take the lease first: under heavy
/// contention that keeps the lease with tasks already running instead of
/// switching tasks on every release, and the handoffs in turn keep every
/// waiter's wait bounded.
const FAIR_EVERY: Duration = Duration::from_micros(500);

/// One task waiting for a key.
struct Waiter {
    /// What the lease is written as when a release hands it straight to
    /// this waiter; `None` for a waiter that is only woken to try again.
    grant: Option<Grant>,
    state: Mutex<WaiterState>,
}

/// The waiter's attempt, kept to be written as the lease it is handed.
struct Grant {
    token: StoredToken,
    ttl: Duration,
    fenced: bool,
}

#[derive(Default)]
struct WaiterState {
    /// The waiting task's waker, from its last poll.
    waker: Option<Waker>,
    /// Set, under the shard lock, when a release takes the waiter off the
    /// queue.
    woken: Option<Woken>,
    /// Whether the waiting task has read `woken`: from then on what was
    /// handed over is its own to look after.
    seen: bool,
}

impl Waiter {
    fn state(&self) -> MutexGuard<'_, WaiterState> {
        // Nothing panics while holding it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
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
#[derive(Clone, PartialEq)]
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
            .is_some_and(|queue| !queue.waiters.is_empty())
    }

    /// A slot with no live lease and nobody waiting can be dropped.
    fn is_garbage(&self, now: Instant) -> bool {
        self.live_lease(now).is_none() && !self.has_waiters()
    }

    /// Drops the lease and hands the key on (see [`hand_on`](Slot::hand_on)).
    /// Returns the waiter's waker, and whether the slot can go: without a
    /// waiter, it holds nothing any more.
    #[inline]
    fn vacate(&mut self, now: Instant, fences: &AtomicU64) -> (Option<Waker>, bool) {
        self.lease = None;
        if !self.has_waiters() {
            return (None, true);
        }
        (self.hand_on(now, fences, false), false)
    }

    /// Takes the first waiter off the queue, for a key whose lease is gone,
    /// and returns its waker, to wake once the shard lock is dropped.
    ///
    /// A waiter that takes leases directly is handed this one (written under
    /// its token) when its turn is due: [`FAIR_EVERY`] after the queue was
    /// made or the last handoff, so a waiter on a quiet key, or the first
    /// release after a pause, hands over at once; and always for a lease
    /// given back by a waiter that went away (`passed_on`), which no running
    /// task is after. Otherwise, and for waiters that only want to know, the
    /// waiter is woken to try again.
    fn hand_on(&mut self, now: Instant, fences: &AtomicU64, passed_on: bool) -> Option<Waker> {
        let queue = self.waiters.as_mut()?;
        let waiter = queue.waiters.pop_front()?;
        let due = passed_on || now >= queue.fair_at;
        let mut state = waiter.state();
        state.woken = Some(match &waiter.grant {
            Some(grant) if due => {
                queue.fair_at = now + FAIR_EVERY;
                let fence = next_fence(fences, grant.fenced);
                self.lease = Some(Lease {
                    token: grant.token.clone(),
                    expires: expiry(now, grant.ttl),
                    fence: fence.unwrap_or(0),
                });
                Woken::Granted { fence, since: now }
            }
            _ => Woken::Released,
        });
        state.waker.take()
    }

    /// Queues the attempt `request` to wait for the key, before the shard
    /// lock drops.
    fn wakeup(&mut self, store: &MemoryStore, request: &AcquireRequest<'_>) -> Wakeup {
        let waiter = Arc::new(Waiter {
            grant: request.local.grant.then(|| Grant {
                token: StoredToken::new(request.token),
                ttl: request.ttl,
                fenced: request.fenced,
            }),
            state: Mutex::default(),
        });
        let queue = self.waiters.get_or_insert_with(|| {
            Box::new(Queue {
                waiters: VecDeque::new(),
                fair_at: request.sent + FAIR_EVERY,
            })
        });
        queue.waiters.push_back(Arc::clone(&waiter));
        Wakeup::reporting(Queued {
            store: store.clone(),
            key: Arc::clone(&self.key),
            waiter,
        })
    }

    /// Takes `waiter` off the queue, if it is still on it.
    fn leave(&mut self, waiter: &Arc<Waiter>) {
        if let Some(queue) = &mut self.waiters {
            queue.waiters.retain(|queued| !Arc::ptr_eq(queued, waiter));
        }
    }
}

/// A waiter's side of the queue: resolves when a release takes it off.
struct Queued {
    store: MemoryStore,
    key: Arc<str>,
    waiter: Arc<Waiter>,
}

impl Future for Queued {
    type Output = Woken;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Woken> {
        let mut state = self.waiter.state();
        if let Some(woken) = state.woken {
            state.seen = true;
            return Poll::Ready(woken);
        }
        match &mut state.waker {
            Some(waker) => waker.clone_from(cx.waker()),
            none => *none = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

impl Drop for Queued {
    /// Leaves the queue, or, when a release took this waiter off it and the
    /// waiting task never saw that, passes on what the release gave: the
    /// lease it was handed goes back (and on to the next in line), and a
    /// wake-up to try again goes to the next waiter while the key is free.
    fn drop(&mut self) {
        if self.waiter.state().seen {
            return;
        }
        let now = Instant::now();
        let fences = &self.store.inner.fence;
        self.store.with_shard_waking(&self.key, |shard, hash| {
            let Ok(mut found) = shard.slots.find_entry(hash, |slot| slot.key == self.key) else {
                return ((), None);
            };
            let slot = found.get_mut();
            let woken = self.waiter.state().woken;
            let waker = match woken {
                None => {
                    slot.leave(&self.waiter);
                    None
                }
                Some(Woken::Granted { .. }) => {
                    let token = self.waiter.grant.as_ref().map(|grant| &grant.token);
                    let ours = slot
                        .lease
                        .as_ref()
                        .zip(token)
                        .is_some_and(|(lease, token)| lease.token == *token);
                    if ours {
                        slot.lease = None;
                        slot.hand_on(now, fences, true)
                    } else {
                        None
                    }
                }
                Some(Woken::Released) if slot.live_lease(now).is_none() => {
                    slot.hand_on(now, fences, true)
                }
                Some(Woken::Released) => None,
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
fn expiry(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl).unwrap_or_else(|| now + MAX_TTL)
}

/// The next fencing token, when asked for one: taken under the shard lock of
/// the key being acquired, so tokens of one key are handed out in
/// acquisition order.
fn next_fence(fences: &AtomicU64, fenced: bool) -> Option<u64> {
    fenced.then(|| fences.fetch_add(1, Ordering::Relaxed) + 1)
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

    /// [`with_shard`](MemoryStore::with_shard) for an operation that may
    /// take a waiter off the queue: `f` returns that waiter's waker with its
    /// result, and it is woken once the shard lock is dropped.
    fn with_shard_waking<R>(
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

    fn try_acquire(&self, request: AcquireRequest<'_>) -> Attempt {
        // The caller's send time, on this same clock: no second reading.
        let now = request.sent;
        let expires = expiry(now, request.ttl);
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
                            let fence = next_fence(&self.inner.fence, request.fenced);
                            slot.lease = Some(lease(fence));
                            Attempt::Acquired { fence }
                        }
                        Some(held) => Attempt::Held {
                            remaining: Some(held.expires - now),
                            wakeup: request.wake.then(|| slot.wakeup(self, &request)),
                        },
                    }
                }
                Entry::Vacant(vacant) => {
                    let fence = next_fence(&self.inner.fence, request.fenced);
                    vacant.insert(Slot {
                        key: request
                            .local
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

    /// Compare-and-delete; also the synchronous path for dropped guards.
    fn release_sync(&self, key: &str, token: &str) -> bool {
        let now = Instant::now();
        self.with_shard_waking(key, |shard, hash| {
            let Ok(mut found) = shard.slots.find_entry(hash, |slot| &*slot.key == key) else {
                return (false, None);
            };
            let slot = found.get_mut();
            let ours = slot
                .lease
                .as_ref()
                .is_some_and(|lease| lease.token.is(token));
            if !ours {
                return (false, None);
            }
            let was_live = slot.live_lease(now).is_some();
            let (waker, vacant) = slot.vacate(now, &self.inner.fence);
            if vacant {
                found.remove();
            }
            (was_live, waker)
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
                    lease.expires = expiry(now, ttl);
                    true
                }
                _ => false,
            }
        })
    }

    fn force_release_sync(&self, key: &str) -> bool {
        let now = Instant::now();
        self.with_shard_waking(key, |shard, hash| {
            let Ok(mut found) = shard.slots.find_entry(hash, |slot| &*slot.key == key) else {
                return (false, None);
            };
            let slot = found.get_mut();
            let was_live = slot.live_lease(now).is_some();
            let (waker, vacant) = slot.vacate(now, &self.inner.fence);
            if vacant {
                found.remove();
            }
            (was_live, waker)
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

    /// A store where "a" holds "k" for `ttl`.
    fn held_by_a(ttl: Duration) -> MemoryStore {
        let store = MemoryStore::new();
        assert!(matches!(
            acquire(&store, "k", "a", ttl),
            Attempt::Acquired { .. }
        ));
        store
    }

    /// Queues `token` behind the holder of `key`, asking to be handed the
    /// lease (as a single-permit `Lock` does) or only woken.
    fn wait(store: &MemoryStore, key: &str, token: &str, grant: bool) -> Wakeup {
        let mut request = AcquireRequest::new(key, token, TTL).waking().fencing();
        request.local.grant = grant;
        match store.try_acquire(request) {
            Attempt::Held {
                wakeup: Some(wakeup),
                ..
            } => wakeup,
            other => panic!("{key} should be held, with a wakeup: {other:?}"),
        }
    }

    fn holder_token(store: &MemoryStore, key: &str) -> Option<String> {
        store
            .holder_sync(key)
            .map(|holder| holder.token().to_owned())
    }

    /// Lets the next release hand the lease over in turn.
    fn handoff_due() {
        std::thread::sleep(FAIR_EVERY + Duration::from_millis(1));
    }

    #[test]
    fn a_release_hands_the_lease_to_the_first_waiter_in_order() {
        let store = held_by_a(TTL);
        let mut b = wait(&store, "k", "b", true);
        let mut c = wait(&store, "k", "c", true);
        assert!(b.woken_now().is_none() && c.woken_now().is_none());

        handoff_due();
        assert!(store.release_sync("k", "a"));
        // Written under b's token before anyone could barge in.
        assert_eq!(holder_token(&store, "k").as_deref(), Some("b"));
        assert!(
            matches!(acquire(&store, "k", "x", TTL), Attempt::Held { .. }),
            "a newcomer cannot take a lease already handed over"
        );
        let Some(Woken::Granted {
            fence: Some(b_fence),
            ..
        }) = b.woken_now()
        else {
            panic!("b is handed the lease, with a fencing token");
        };
        assert!(c.woken_now().is_none(), "c is still second in line");

        handoff_due();
        assert!(store.release_sync("k", "b"));
        assert_eq!(holder_token(&store, "k").as_deref(), Some("c"));
        let Some(Woken::Granted {
            fence: Some(c_fence),
            ..
        }) = c.woken_now()
        else {
            panic!("c is handed the lease next");
        };
        assert!(c_fence > b_fence, "fencing tokens keep increasing");
        drop((b, c));
        assert_eq!(
            holder_token(&store, "k").as_deref(),
            Some("c"),
            "waiters that saw their grant leave the lease to their guards"
        );
    }

    #[test]
    fn a_lease_handed_to_a_waiter_that_went_away_is_given_back_and_passed_on() {
        let store = held_by_a(TTL);
        let b = wait(&store, "k", "b", true);
        let mut c = wait(&store, "k", "c", true);
        handoff_due();
        assert!(store.release_sync("k", "a"));
        assert_eq!(holder_token(&store, "k").as_deref(), Some("b"));
        // b's task was cancelled before it saw the lease was its own.
        drop(b);
        assert_eq!(holder_token(&store, "k").as_deref(), Some("c"));
        assert!(matches!(c.woken_now(), Some(Woken::Granted { .. })));
        drop(c);
        assert!(store.release_sync("k", "c"));
        assert!(store.is_empty(), "nothing is left behind");

        // With nobody after it, the lease goes back to being free.
        assert!(matches!(
            acquire(&store, "k", "a", TTL),
            Attempt::Acquired { .. }
        ));
        let b = wait(&store, "k", "b", true);
        handoff_due();
        assert!(store.force_release_sync("k"));
        drop(b);
        assert!(store.holder_sync("k").is_none());
        assert!(store.is_empty());
    }

    #[test]
    fn a_wake_to_retry_that_went_unseen_goes_to_the_next_waiter() {
        let store = held_by_a(TTL);
        let b = wait(&store, "k", "b", false);
        let mut c = wait(&store, "k", "c", false);
        assert!(store.release_sync("k", "a"));
        assert!(store.holder_sync("k").is_none(), "only woken, not handed");
        drop(b);
        assert!(
            matches!(c.woken_now(), Some(Woken::Released)),
            "the free key's wake-up is passed on"
        );
    }

    #[test]
    fn a_waiter_that_goes_away_leaves_the_queue() {
        let store = held_by_a(Duration::from_millis(1));
        let b = wait(&store, "k", "b", true);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(store.purge_expired(), 1, "the waiter keeps the slot alive");
        drop(b);
        assert!(store.is_empty(), "the last waiter to leave takes the slot");

        // A release with nobody queued any more frees the key outright.
        assert!(matches!(
            acquire(&store, "k", "a", TTL),
            Attempt::Acquired { .. }
        ));
        drop(wait(&store, "k", "b", true));
        assert!(store.release_sync("k", "a"));
        assert!(store.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn quick_releases_wake_waiters_and_a_handoff_comes_in_turn() {
        let store = held_by_a(TTL);
        let mut b = wait(&store, "k", "b", true);
        let mut c = wait(&store, "k", "c", true);
        // Released at once: b is woken to try again, and anyone running may
        // take the key first.
        assert!(store.release_sync("k", "a"));
        assert!(matches!(b.woken_now(), Some(Woken::Released)));
        assert!(store.holder_sync("k").is_none());
        assert!(matches!(
            acquire(&store, "k", "x", TTL),
            Attempt::Acquired { .. }
        ));
        // Once the turn is due, the next release hands over to c, who has
        // been waiting all along.
        tokio::time::advance(FAIR_EVERY).await;
        assert!(store.release_sync("k", "x"));
        assert_eq!(holder_token(&store, "k").as_deref(), Some("c"));
        assert!(matches!(c.woken_now(), Some(Woken::Granted { .. })));
        // And the turn after that is FAIR_EVERY later.
        let mut d = wait(&store, "k", "d", true);
        assert!(store.release_sync("k", "c"));
        assert!(matches!(d.woken_now(), Some(Woken::Released)));
    }
}
