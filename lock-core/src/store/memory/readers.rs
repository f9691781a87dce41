//! A key's readers: each a lease of its own, under its own token and TTL.

use tokio::time::Instant;

use super::lease::Lease;

/// The readers of one key ([`Lock::read`](crate::Lock::read)). Expired
/// leases stay until the next change prunes them; every question is asked
/// at a given moment and counts only the leases live then.
#[derive(Default)]
pub(super) struct Readers {
    leases: Vec<Lease>,
}

impl Readers {
    /// The readers' leases live at `now`.
    pub(super) fn live(&self, now: Instant) -> impl Iterator<Item = &Lease> {
        self.leases.iter().filter(move |lease| lease.live_at(now))
    }

    /// Whether any reader's lease is live at `now`.
    pub(super) fn any_live(&self, now: Instant) -> bool {
        self.live(now).next().is_some()
    }

    /// When the last live reader's lease ends, if any is live at `now`: a
    /// writer can have the key from then on, unless a release comes first.
    pub(super) fn last_expiry(&self, now: Instant) -> Option<Instant> {
        self.live(now).map(|lease| lease.expires).max()
    }

    /// Adds a reader's lease. The expired ones are pruned when the list
    /// is full, before it grows: amortised O(1) per reader, and the list
    /// never holds more than twice the live readers it had at its last
    /// growth.
    pub(super) fn add(&mut self, lease: Lease, now: Instant) {
        if self.leases.len() == self.leases.capacity() {
            self.leases.retain(|lease| lease.live_at(now));
        }
        self.leases.push(lease);
    }

    /// The lease of the reader whose token is `token`, live or not.
    pub(super) fn find_mut(&mut self, token: &str) -> Option<&mut Lease> {
        self.leases.iter_mut().find(|lease| lease.token.is(token))
    }

    /// Takes away the lease of the reader whose token is `token`, live or
    /// not; returns it.
    pub(super) fn remove(&mut self, token: &str) -> Option<Lease> {
        let at = self.leases.iter().position(|lease| lease.token.is(token))?;
        Some(self.leases.swap_remove(at))
    }

    /// Takes away one lease written under the very token `token` holds, as
    /// a waiter's grant was written; returns whether there was one.
    ///
    /// One: the task may hold a second under the same token, taken by its
    /// own next attempt while the grant went unseen, and its guard stands
    /// for that one. The one that ends first goes, so the lease kept lasts
    /// at least as long as the guard counts on (from its attempt's send).
    pub(super) fn remove_stored(&mut self, token: &super::token::StoredToken) -> bool {
        let first_to_end = self
            .leases
            .iter()
            .enumerate()
            .filter(|(_, lease)| lease.token == *token)
            .min_by_key(|(_, lease)| lease.expires)
            .map(|(at, _)| at);
        first_to_end.map(|at| self.leases.swap_remove(at)).is_some()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::MemoryStore;
    use super::super::tests::{TTL, acquire};
    use crate::store::{AcquireRequest, Attempt, Wakeup, Woken};

    fn read(store: &MemoryStore, token: &str, ttl: Duration) -> Attempt {
        store.try_acquire(AcquireRequest::new("k", token, ttl).reading())
    }

    fn acquired(attempt: &Attempt) -> bool {
        matches!(attempt, Attempt::Acquired { .. })
    }

    /// Queues `token` for "k", as a reader when `reader`, asking to be
    /// handed the lease as a waiting `Lock` does.
    fn wait(store: &MemoryStore, token: &str, reader: bool) -> Wakeup {
        let mut request = AcquireRequest::new("k", token, TTL).waking();
        request.read = reader;
        request.local.grant = true;
        match store.try_acquire(request) {
            Attempt::Held {
                wakeup: Some(wakeup),
                ..
            } => wakeup,
            other => panic!("k should be held against {token}, with a wakeup: {other:?}"),
        }
    }

    fn readers(store: &MemoryStore) -> Vec<String> {
        let mut tokens: Vec<String> = store
            .list_sync("k")
            .into_iter()
            .filter(|(_, holder)| holder.is_reader())
            .map(|(_, holder)| holder.token().to_owned())
            .collect();
        tokens.sort();
        tokens
    }

    #[test]
    fn readers_hold_a_key_together_and_a_writer_waits_for_the_last_of_them() {
        // The point of a read side: readers never exclude each other, and
        // the writer never overlaps any of them.
        let store = MemoryStore::new();
        assert!(acquired(&read(&store, "r1", TTL)));
        assert!(acquired(&read(&store, "r2", TTL)), "readers share the key");
        assert_eq!(readers(&store), ["r1", "r2"], "list shows each reader");
        assert!(
            !acquired(&acquire(&store, "k", "w", TTL)),
            "a writer is held off while readers hold the key"
        );
        assert!(store.release_sync("k", "r1"));
        assert_eq!(
            readers(&store),
            ["r2"],
            "a release frees its own reader only"
        );
        assert!(!acquired(&acquire(&store, "k", "w", TTL)), "r2 still reads");
        assert!(store.release_sync("k", "r2"));
        assert!(
            acquired(&acquire(&store, "k", "w", TTL)),
            "the last reader gone, the writer gets in"
        );
        assert!(
            !acquired(&read(&store, "r3", TTL)),
            "a writer holds readers off"
        );
    }

    #[test]
    fn a_waiting_writer_holds_off_new_readers_and_is_handed_the_key_by_the_last_reader() {
        // Writer preference: without it, overlapping readers could keep the
        // key read for ever and the writer would never run.
        let store = MemoryStore::new();
        assert!(acquired(&read(&store, "r1", TTL)));
        let mut writer = wait(&store, "w", false);
        assert!(
            !acquired(&read(&store, "r2", TTL)),
            "a new reader waits behind the waiting writer"
        );
        std::thread::sleep(super::super::queue::FAIR_EVERY + Duration::from_millis(1));
        assert!(store.release_sync("k", "r1"));
        assert!(
            matches!(writer.woken_now(), Some(Woken::Granted { .. })),
            "the last reader to go hands the key to the writer"
        );
        let holder = store.holder_sync("k").expect("held by the writer");
        assert_eq!(holder.token(), "w");
        assert!(!holder.is_reader());
    }

    #[test]
    fn a_writer_release_lets_every_reader_queued_first_in_together() {
        let store = MemoryStore::new();
        assert!(acquired(&acquire(&store, "k", "w", TTL)));
        let mut r1 = wait(&store, "r1", true);
        let mut r2 = wait(&store, "r2", true);
        let mut w2 = wait(&store, "w2", false);
        std::thread::sleep(super::super::queue::FAIR_EVERY + Duration::from_millis(1));
        assert!(store.release_sync("k", "w"));
        assert!(matches!(r1.woken_now(), Some(Woken::Granted { .. })));
        assert!(
            matches!(r2.woken_now(), Some(Woken::Granted { .. })),
            "the second reader comes in with the first"
        );
        assert!(w2.woken_now().is_none(), "the next writer waits for both");
        assert_eq!(readers(&store), ["r1", "r2"]);
        drop((r1, r2));
        std::thread::sleep(super::super::queue::FAIR_EVERY + Duration::from_millis(1));
        assert!(store.release_sync("k", "r1") && store.release_sync("k", "r2"));
        assert!(matches!(w2.woken_now(), Some(Woken::Granted { .. })));
    }

    #[test]
    fn a_reader_handed_the_key_that_went_away_gives_its_lease_back() {
        // Nothing left behind: a cancelled reader's grant must not hold the
        // writer behind it off until its TTL.
        let store = MemoryStore::new();
        assert!(acquired(&acquire(&store, "k", "w", TTL)));
        let r1 = wait(&store, "r1", true);
        let mut w2 = wait(&store, "w2", false);
        std::thread::sleep(super::super::queue::FAIR_EVERY + Duration::from_millis(1));
        assert!(store.release_sync("k", "w"));
        assert_eq!(readers(&store), ["r1"], "r1 was handed the key");
        drop(r1);
        assert!(
            readers(&store).is_empty(),
            "r1's task never saw it: given back"
        );
        assert!(
            matches!(w2.woken_now(), Some(Woken::Granted { .. })),
            "and passed on to the next in line"
        );
    }

    #[test]
    fn a_writer_that_stops_waiting_lets_the_readers_behind_it_in() {
        let store = MemoryStore::new();
        assert!(acquired(&read(&store, "r1", TTL)));
        let writer = wait(&store, "w", false);
        let mut r2 = wait(&store, "r2", true);
        drop(writer);
        assert!(
            matches!(r2.woken_now(), Some(Woken::Granted { .. })),
            "nothing holds r2 off any more"
        );
        assert_eq!(readers(&store), ["r1", "r2"]);
    }

    #[test]
    fn each_reader_expires_alone_and_extends_alone() {
        // A crashed reader holds writers off until its own TTL, no longer;
        // and extending one reader never prolongs another.
        let store = MemoryStore::new();
        assert!(acquired(&read(&store, "short", Duration::from_millis(20))));
        assert!(acquired(&read(&store, "long", TTL)));
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(readers(&store), ["long"], "the short reader expired alone");
        assert!(
            !store.extend_sync("k", "short", TTL),
            "an expired reader cannot come back"
        );
        assert!(store.extend_sync("k", "long", Duration::from_millis(20)));
        std::thread::sleep(Duration::from_millis(30));
        assert!(readers(&store).is_empty());
        assert!(acquired(&acquire(&store, "k", "w", TTL)));
    }

    #[test]
    fn a_stale_reader_never_releases_or_extends_the_writer_that_came_after_it() {
        let store = MemoryStore::new();
        assert!(acquired(&read(&store, "r", Duration::from_millis(5))));
        std::thread::sleep(Duration::from_millis(10));
        assert!(acquired(&acquire(&store, "k", "w", TTL)));
        assert!(!store.release_sync("k", "r"), "the reader's lease is gone");
        assert!(!store.extend_sync("k", "r", TTL));
        assert_eq!(
            store
                .holder_sync("k")
                .map(|h| h.token().to_owned())
                .as_deref(),
            Some("w")
        );
        assert!(store.force_release_sync("k"));
        assert!(store.is_empty(), "nothing is left behind");
    }

    #[test]
    fn force_release_frees_every_reader() {
        let store = MemoryStore::new();
        assert!(acquired(&read(&store, "r1", TTL)));
        assert!(acquired(&read(&store, "r2", TTL)));
        assert!(store.force_release_sync("k"));
        assert!(readers(&store).is_empty());
        assert!(acquired(&acquire(&store, "k", "w", TTL)));
    }

    /// What a waiting `Lock`'s next round sends: the same token, waking,
    /// asking to be handed the key, its last round's wakeup still alive.
    fn retry(store: &MemoryStore, token: &str, reader: bool) -> Attempt {
        let mut request = AcquireRequest::new("k", token, TTL).waking();
        request.read = reader;
        request.local.grant = true;
        store.try_acquire(request)
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_only_woken_ahead_of_a_queued_writer_does_not_leave_the_key_idle() {
        // w0 writes; r queues, then w behind r. w0 lets go before a handoff
        // is due. Were r only woken, its retry would be refused (a writer
        // waits) and r would queue behind w, with the key free and nobody
        // waking w: both would sleep out their naps on an idle key.
        let store = MemoryStore::new();
        assert!(acquired(&acquire(&store, "k", "w0", TTL)));
        let mut r = wait(&store, "r", true);
        let mut w = wait(&store, "w", false);
        assert!(store.release_sync("k", "w0"));
        let woken = r.woken_now();
        let again = if matches!(woken, Some(Woken::Granted { .. })) {
            None
        } else {
            Some(retry(&store, "r", true))
        };
        drop(r);
        let reading = !readers(&store).is_empty();
        assert!(
            reading || w.woken_now().is_some(),
            "the key is free, yet neither r ({woken:?}, retry {again:?}) nor w has it coming"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_reader_refused_only_for_a_queued_writer_wakes_it_when_the_key_is_free() {
        // A reader that only asks to be woken (a direct store caller) can be
        // refused for a writer that waits, on a key nobody holds: that
        // writer must hear the key is free, or it sleeps out its nap.
        let store = MemoryStore::new();
        assert!(acquired(&acquire(&store, "k", "w0", TTL)));
        let mut request = AcquireRequest::new("k", "r", TTL).waking().reading();
        request.local.grant = false;
        let Attempt::Held {
            wakeup: Some(mut r),
            ..
        } = store.try_acquire(request)
        else {
            panic!("r waits behind w0");
        };
        let mut w = wait(&store, "w", false);
        assert!(store.release_sync("k", "w0"));
        assert!(matches!(r.woken_now(), Some(Woken::Released)));
        let again = store.try_acquire(AcquireRequest::new("k", "r", TTL).waking().reading());
        assert!(!acquired(&again), "a writer waits: r waits behind it");
        assert!(
            w.woken_now().is_some(),
            "the key is free and w waits first: w must be woken or handed it"
        );
        drop(r);
    }

    #[test]
    fn a_readers_handover_and_its_own_retry_leave_it_exactly_one_lease() {
        // r's nap ends; another thread's release hands r's old waiter a
        // reader lease under r's token, and r's next attempt is admitted
        // too. The old wakeup, never seen, gives one lease back as it drops:
        // one, not every lease under r's token, or r's guard holds nothing
        // and a writer gets in while r reads.
        let store = MemoryStore::new();
        assert!(acquired(&acquire(&store, "k", "w", TTL)));
        let r = wait(&store, "r", true);
        std::thread::sleep(super::super::queue::FAIR_EVERY + Duration::from_millis(1));
        assert!(store.release_sync("k", "w"));
        assert_eq!(readers(&store), ["r"], "r was handed the key");
        assert!(
            acquired(&retry(&store, "r", true)),
            "r's own attempt is admitted"
        );
        drop(r);
        assert_eq!(readers(&store), ["r"], "the guard's lease is still there");
        assert!(
            !acquired(&acquire(&store, "k", "w2", TTL)),
            "no writer gets in while r reads"
        );
        assert!(store.release_sync("k", "r"));
        assert!(readers(&store).is_empty(), "and r's release leaves nothing");
    }
}
