//! The process-local side of release notifications, for stores that can
//! observe releases from elsewhere (Redis pub/sub, PostgreSQL
//! LISTEN/NOTIFY, etcd watches).
//!
//! A waiter registers its interest in a key *before* its acquire attempt is
//! sent, so a release that races with the attempt still wakes it; the store's
//! one listener calls [`Waiters::released`] for each release it hears, and
//! [`Waiters::wake_all`] after it reconnects, when a release may have gone
//! unheard. Entries live exactly as long as somebody waits for their key.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use tokio::sync::Notify;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::store::Wakeup;

/// Which keys this process's waiters are waiting for, by whatever key the
/// store's release messages carry (Redis: the lease key `{lock:name}`).
///
/// Each key's entry is shared by the waiters of that key; the map holds
/// one reference and each waiter's [`Interest`] another, so an entry with a
/// single reference has no waiter left and is removed. Writers (and plain
/// waiters) and readers wait in two queues of the entry: a release wakes a
/// writer first, since it excludes the others anyway and a waiting writer
/// goes before new readers; a reader let in wakes the next reader (see
/// [`reader_admitted`](Waiters::reader_admitted)).
#[derive(Default)]
pub struct Waiters {
    keys: Mutex<HashMap<Box<str>, Arc<Entry>>>,
    /// Where the first waiter for a key and the last one leaving are
    /// announced, for a store that listens per key (see [`Waiters::watched`]).
    watch: Option<UnboundedSender<Watch>>,
}

/// The waiters of one key.
#[derive(Default)]
struct Entry {
    writers: Arc<Notify>,
    readers: Arc<Notify>,
    /// Observers of the key's changes: each change wakes all of them.
    observers: Arc<Notify>,
    /// How many of the waiters are writers.
    writers_waiting: AtomicUsize,
}

impl Entry {
    /// Wakes one writer, or a reader when no writer waits.
    fn wake_one(&self) {
        if self.writers_waiting.load(Ordering::SeqCst) > 0 {
            self.writers.notify_one();
        } else {
            self.readers.notify_one();
        }
    }

    /// A writer stopped waiting: wake one reader, who wakes the next as it
    /// gets in, unless another writer still waits (the readers stay behind
    /// it).
    fn writer_left(&self) {
        if self.writers_waiting.load(Ordering::SeqCst) == 0 {
            self.readers.notify_one();
        }
    }

    fn wake_all(&self) {
        self.writers.notify_waiters();
        self.readers.notify_waiters();
        self.observers.notify_waiters();
    }
}

/// Which queue of its key's entry a registration waits in.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A writer, or any waiter of a store without readers.
    Writer,
    Reader,
    Observer,
}

impl Kind {
    fn from_read(read: bool) -> Kind {
        if read { Kind::Reader } else { Kind::Writer }
    }
}

/// A change in which keys this process waits for.
#[derive(Debug, PartialEq, Eq)]
pub enum Watch {
    /// The first waiter for this key arrived: start listening for its
    /// releases, then [`wake_key`](Waiters::wake_key) it once, since a
    /// release may have come before the listening started.
    Start(Box<str>),
    /// The last waiter for this key left: stop listening.
    Stop(Box<str>),
}

impl Waiters {
    /// A registry that announces, in order, each key gaining its first
    /// waiter and losing its last: for a store whose notifications are per
    /// key, so a process listens only for the keys it waits for.
    pub fn watched() -> (Self, UnboundedReceiver<Watch>) {
        let (sender, receiver) = unbounded_channel();
        let waiters = Waiters {
            keys: Mutex::default(),
            watch: Some(sender),
        };
        (waiters, receiver)
    }

    /// Every key somebody waits for now.
    pub fn keys(&self) -> Vec<Box<str>> {
        self.lock().keys().cloned().collect()
    }

    /// Announces `change`; called under the map's lock, so announcements are
    /// in the order the map changed. A listener that is gone has nothing to
    /// start or stop.
    fn announce(&self, change: impl FnOnce() -> Watch) {
        if let Some(watch) = &self.watch {
            let _ = watch.send(change());
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Box<str>, Arc<Entry>>> {
        // Nothing in this module panics while holding the lock, and the map
        // stays consistent at every step; a poisoned lock is still usable.
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether anybody in this process waits for `key`.
    pub fn contains(&self, key: &str) -> bool {
        self.lock().contains_key(key)
    }

    /// Whether a writer (or a plain waiter) in this process waits for
    /// `key`.
    pub fn has_writers(&self, key: &str) -> bool {
        self.lock()
            .get(key)
            .is_some_and(|entry| entry.writers_waiting.load(Ordering::SeqCst) > 0)
    }

    /// How many keys somebody in this process waits for.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether nobody in this process waits for any key.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Registers a waiter for the next release of `key`, enabled at once so a
    /// notification sent from now on is not lost: a writer, or any waiter
    /// of a store without readers.
    pub fn register(self: &Arc<Self>, key: &str) -> Interest {
        self.enter(key, Kind::Writer)
    }

    /// Registers a reader waiting for `key` (see [`register`](Waiters::register)).
    pub fn register_reader(self: &Arc<Self>, key: &str) -> Interest {
        self.enter(key, Kind::Reader)
    }

    /// [`register_reader`](Waiters::register_reader) when `read` is set (as
    /// an [`AcquireRequest`](crate::store::AcquireRequest)'s is for a
    /// reader), else [`register`](Waiters::register).
    pub fn register_for(self: &Arc<Self>, key: &str, read: bool) -> Interest {
        self.enter(key, Kind::from_read(read))
    }

    /// Registers an observer of `key`, woken by its next change, whatever
    /// it is: a release ([`released`](Waiters::released)), a change
    /// announced with [`changed`](Waiters::changed), or a wake of every
    /// waiter. Every observer of the key is woken, and none of the waiters
    /// is woken in an observer's place. Make its wakeup with
    /// [`Wakeup::observer`]: an observer has no wake to pass on.
    pub fn observe(self: &Arc<Self>, key: &str) -> Interest {
        self.enter(key, Kind::Observer)
    }

    /// A change of `key` other than a release was announced (an acquire):
    /// wake its observers, and no waiter.
    pub fn changed(&self, key: &str) {
        if let Some(entry) = self.lock().get(key) {
            entry.observers.notify_waiters();
        }
    }

    fn enter(self: &Arc<Self>, key: &str, kind: Kind) -> Interest {
        let entry = {
            let mut keys = self.lock();
            let entry = match keys.get(key) {
                Some(entry) => Arc::clone(entry),
                None => {
                    let entry = Arc::new(Entry::default());
                    keys.insert(key.into(), Arc::clone(&entry));
                    self.announce(|| Watch::Start(key.into()));
                    entry
                }
            };
            if kind == Kind::Writer {
                entry.writers_waiting.fetch_add(1, Ordering::SeqCst);
            }
            entry
        };
        let queue = match kind {
            Kind::Writer => &entry.writers,
            Kind::Reader => &entry.readers,
            Kind::Observer => &entry.observers,
        };
        let mut notified = Box::pin(Arc::clone(queue).notified_owned());
        notified.as_mut().enable();
        Interest {
            waiters: Arc::clone(self),
            key: key.into(),
            entry,
            notified,
            writer: kind == Kind::Writer,
            counted: kind == Kind::Writer,
            observer: kind == Kind::Observer,
            woken: false,
        }
    }

    /// A release of `key` was announced: wake one local waiter, a writer if
    /// one waits. It retries; if it fails again it waits again, and the
    /// others keep waiting for the next release.
    pub fn released(&self, key: &str) {
        if let Some(entry) = self.lock().get(key) {
            entry.wake_one();
            entry.observers.notify_waiters();
        }
    }

    /// A reader of `key` got in: wake the next reader of `key` waiting in
    /// this process, who can get in too.
    ///
    /// A release wakes one local waiter ([`released`](Waiters::released)),
    /// which is right when the waiters are writers: one gets in, and the
    /// others would only fail. Readers share, so each one admitted passes
    /// the wake on; without it, one writer's release lets one of this
    /// process's waiting readers in and leaves the others asleep until
    /// their nap ends. Call it with the reader's own [`Interest`] dropped,
    /// so the wake goes to somebody else.
    pub fn reader_admitted(&self, key: &str) {
        self.readers_may_enter(key);
    }

    /// What held the readers of `key` off may be gone (a waiting writer's
    /// claim ended): wake one reader waiting in this process; each one let
    /// in wakes the next.
    pub fn readers_may_enter(&self, key: &str) {
        if let Some(entry) = self.lock().get(key) {
            entry.readers.notify_one();
        }
    }

    /// Wakes every waiter of `key` (each retries once): used when listening
    /// for `key` has just started, since a release may have come before, or
    /// when listening for it ended with a release possibly unheard.
    pub fn wake_key(&self, key: &str) {
        if let Some(entry) = self.lock().get(key) {
            entry.wake_all();
        }
    }

    /// Wakes every waiter: used after the subscription (re)connects, when a
    /// release may have gone unheard.
    pub fn wake_all(&self) {
        for entry in self.lock().values() {
            entry.wake_all();
        }
    }
}

/// One waiter's registration; the future inside the
/// [`Wakeup`](crate::store::Wakeup) it becomes.
///
/// Make that wakeup with [`into_wakeup`](Interest::into_wakeup) (or, for a
/// signal that wraps the interest, [`Wakeup::new`] with
/// [`pass_on`](Interest::pass_on)): a waiter woken and then dropped before
/// its next attempt is answered passes its wake to the next waiter, who
/// would otherwise sleep on while the lock is free.
pub struct Interest {
    waiters: Arc<Waiters>,
    key: Box<str>,
    entry: Arc<Entry>,
    notified: Pin<Box<OwnedNotified>>,
    /// Whether this is a writer's (or a plain waiter's): readers wait
    /// behind it.
    writer: bool,
    /// Whether this is a writer still counted as waiting: from its
    /// registration until it is woken (its wakeup may be kept a while
    /// after that, but it is no longer in the queue to be woken) or leaves.
    counted: bool,
    /// Whether this is an observer's ([`Waiters::observe`]): woken with
    /// all the others, it has no wake to pass on.
    observer: bool,
    /// Whether this interest has resolved for its waiter.
    woken: bool,
}

impl Interest {
    /// This interest as the [`Wakeup`] of an attempt that found its key
    /// held, passing its wake on if the waiter leaves before its next
    /// attempt is answered ([`Wakeup::new`]), and, for a writer,
    /// waking the readers of this process behind it if it stops waiting
    /// without the lease ([`Wakeup::withdrawing`], [`stand_aside`](Interest::stand_aside)).
    pub fn into_wakeup(self) -> Wakeup {
        let pass_on = self.pass_on();
        match self.writer {
            true => {
                let stand_aside = self.stand_aside();
                Wakeup::new(self, pass_on).withdrawing(stand_aside)
            }
            false => Wakeup::new(self, pass_on),
        }
    }

    /// [`into_wakeup`](Interest::into_wakeup) for a writer whose attempt
    /// left something in the store that holds new readers off while it
    /// waits (a claim on their turn): if the writer stops waiting without
    /// the lease, `withdraw` takes it back, on a task of its own, and then
    /// the readers of this process behind the writer are woken. Outside a
    /// tokio runtime `withdraw` is not run (what it would take back ends
    /// on its own), and the readers are woken at once.
    ///
    /// Without it, readers of every process would wait out the claim
    /// after the writer gave up; and those of this process, whose wake went
    /// to the writer, would sleep on until their nap ended.
    pub fn into_wakeup_withdrawing(
        self,
        withdraw: impl Future<Output = ()> + Send + 'static,
    ) -> Wakeup {
        let pass_on = self.pass_on();
        let stand_aside = self.stand_aside();
        let withdrawing = move || match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    withdraw.await;
                    stand_aside();
                });
            }
            Err(_) => stand_aside(),
        };
        Wakeup::new(self, pass_on).withdrawing(withdrawing)
    }

    /// What a writer that stops waiting without the lease does, for a
    /// store that wraps the interest in a signal of its own (see
    /// [`into_wakeup`](Interest::into_wakeup)), once the interest is
    /// dropped: unless another writer of this process still waits for the
    /// key, wake one reader waiting for it, who wakes the next as it gets
    /// in ([`Waiters::reader_admitted`]). A release wakes a writer first,
    /// so the readers behind it may have slept through the release the
    /// writer took and did not use. Does nothing for a reader.
    pub fn stand_aside(&self) -> impl FnOnce() + Send + 'static {
        let waiters = Arc::clone(&self.waiters);
        // Weak, as in `pass_on`: the entry leaves the map with its last
        // interest, and then nobody is left to wake.
        let entry = Arc::downgrade(&self.entry);
        let writer = self.writer;
        move || {
            let _locked = waiters.lock();
            if let Some(entry) = entry.upgrade().filter(|_| writer) {
                entry.writer_left();
            }
        }
    }

    /// What wakes the next waiter of this interest's key in its place, for
    /// a store that wraps the interest in a signal of its own before making
    /// it a [`Wakeup`] (see [`into_wakeup`](Interest::into_wakeup)): a writer
    /// if one waits, else a reader.
    pub fn pass_on(&self) -> impl FnOnce() + Send + 'static {
        let waiters = Arc::clone(&self.waiters);
        // Weak: the entry leaves the map when its last interest does (see
        // `drop`, which counts the strong references); a pass-on kept
        // beside an interest must not keep it there.
        let entry = Arc::downgrade(&self.entry);
        move || {
            // Under the map's lock, as every wake is sent (and as `drop`
            // counts references).
            let _locked = waiters.lock();
            if let Some(entry) = entry.upgrade() {
                entry.wake_one();
            }
        }
    }

    /// No longer counted as a waiting writer; under the map's lock, as the
    /// count is read when a wake is sent.
    fn uncount(&mut self, _locked: &MutexGuard<'_, HashMap<Box<str>, Arc<Entry>>>) {
        if std::mem::take(&mut self.counted) {
            self.entry.writers_waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Future for Interest {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        std::task::ready!(self.notified.as_mut().poll(cx));
        self.woken = true;
        // Woken: out of the queue, so no longer a writer a wake could go to.
        if self.counted {
            let waiters = Arc::clone(&self.waiters);
            let locked = waiters.lock();
            self.uncount(&locked);
        }
        Poll::Ready(())
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        // Under the map's lock, as every wake is sent: a wake is either
        // sent before this waiter leaves (and passed on below, if it never
        // saw it) or after it no longer counts as a writer (and goes to
        // another writer, or to the readers).
        let waiters = Arc::clone(&self.waiters);
        let mut keys = waiters.lock();
        // A wake sent to this waiter that it never saw (it left first)
        // belongs to somebody else: tokio passes it on within this queue
        // only, so it is taken here and sent to whoever is next, writer or
        // reader, once this waiter no longer counts.
        let unseen = !self.woken && !self.observer && {
            let mut cx = Context::from_waker(std::task::Waker::noop());
            self.notified.as_mut().poll(&mut cx).is_ready()
        };
        self.uncount(&keys);
        if unseen {
            self.entry.wake_one();
        }
        // Two references left: the map's and ours. Every clone is made
        // under this lock, so the count cannot grow while we check.
        if keys
            .get(&*self.key)
            .is_some_and(|entry| Arc::ptr_eq(entry, &self.entry) && Arc::strong_count(entry) <= 2)
        {
            keys.remove(&*self.key);
            self.waiters
                .announce(|| Watch::Stop(std::mem::take(&mut self.key)));
        }
    }
}

#[cfg(test)]
mod tests;
