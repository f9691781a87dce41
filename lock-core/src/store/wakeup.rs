//! [`Wakeup`]: the future a store hands a waiter, resolving when the key it waits for is released.
//!
//! Every store's wakeup can say "released: try again". An in-process store
//! (memory) can say more: that the release handed the lease straight to this
//! waiter. That part is crate-private and kept together at the end of this
//! file: [`Woken`], what a wakeup reports, [`Wakeup::reporting`], which makes
//! a wakeup that reports it, and the methods [`Lock`](crate::Lock) reads it
//! with. The request side of it is [`Local::grant`](super::local::Local).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::time::Instant;

/// A future that resolves when a held key is released.
///
/// Returned inside [`Attempt::Held`](super::Attempt::Held). It may also
/// resolve spuriously; the waiter simply tries again.
#[must_use = "a wakeup does nothing unless awaited"]
pub struct Wakeup {
    signal: Signal,
    /// What the signal resolved to, once it has: a signal is never polled
    /// again after that (it stays alive, though, until the wakeup is dropped:
    /// a store may go on listening for the key while it is).
    woken: Option<Woken>,
    /// Wakes another waiter of the key, for a waiter that was woken and left
    /// before its next attempt was answered (see [`Wakeup::new`]); `None`
    /// for an observer's, and for an in-process store's reporting one.
    pass_on: Option<Box<dyn FnOnce() + Send>>,
    /// Takes back what the waiter's attempt left standing, if the waiter
    /// stops waiting without the lease (see [`Wakeup::withdrawing`]); run
    /// as the wakeup is dropped, unless its waiter went on first
    /// ([`answered`](Wakeup::answered)).
    withdraw: Option<Box<dyn FnOnce() + Send>>,
}

/// A store's release signal.
enum Signal {
    /// Resolves on a release: the waiter tries again.
    Released(Pin<Box<dyn Future<Output = ()> + Send>>),
    /// Says what the release did for the waiter; from in-process stores only.
    Reporting(Pin<Box<dyn Future<Output = Woken> + Send>>),
    /// Dropped already: the wakeup is being dropped.
    Gone,
}

impl Wakeup {
    /// A waiter's wakeup: `signal` resolves when the key may have been
    /// released, and `pass_on` wakes another waiter of the key if this one,
    /// once woken, leaves before its next attempt is answered (its future
    /// was dropped, or that attempt failed).
    ///
    /// A store that wakes one local waiter per release needs `pass_on`:
    /// the waiter woken is the one meant to get in, and if it leaves
    /// without trying, the others sleep on while the lock is free, until
    /// the old holder's TTL or their own wait runs out. The store kit's
    /// `Interest::into_wakeup` (feature `store-kit`) makes this wakeup for
    /// a waiter of its `Waiters`; a store whose signal wraps an `Interest`
    /// gives `Interest::pass_on` here. A store whose every release wakes
    /// every waiter has no wake to pass on, and says so with `|| {}`.
    ///
    /// ```
    /// use std::sync::Arc;
    ///
    /// use lock_core::store::Wakeup;
    /// use tokio::sync::Notify;
    ///
    /// // Each release wakes one waiter (`notify_one`); a waiter that leaves
    /// // once woken wakes the next in its place.
    /// let released = Arc::new(Notify::new());
    /// let next = Arc::clone(&released);
    /// let wakeup = Wakeup::new(Arc::clone(&released).notified_owned(), move || {
    ///     next.notify_one()
    /// });
    /// # drop(wakeup);
    /// ```
    ///
    /// A waiter's wakeup that cannot pass its wake on does not exist:
    ///
    /// ```compile_fail
    /// use lock_core::store::Wakeup;
    ///
    /// // If this waiter is woken and leaves, who is woken in its place?
    /// let wakeup = Wakeup::new(std::future::pending::<()>());
    /// ```
    pub fn new(
        signal: impl Future<Output = ()> + Send + 'static,
        pass_on: impl FnOnce() + Send + 'static,
    ) -> Self {
        Wakeup {
            signal: Signal::Released(Box::pin(signal)),
            woken: None,
            pass_on: Some(Box::new(pass_on)),
            withdraw: None,
        }
    }

    /// An observer's wakeup, for [`LockStore::observe`](super::LockStore::observe):
    /// `signal` resolves after the key's next change. Every observer of
    /// the key is woken by it, so an observer has no wake to pass on.
    /// Never an attempt's wakeup: that is [`Wakeup::new`]'s.
    pub fn observer(signal: impl Future<Output = ()> + Send + 'static) -> Self {
        Wakeup {
            signal: Signal::Released(Box::pin(signal)),
            woken: None,
            pass_on: None,
            withdraw: None,
        }
    }

    /// The same wakeup, which calls `withdraw` if its waiter stops waiting
    /// without the lease: its wait ran out, an attempt failed, or its
    /// future was dropped. Not when the waiter goes on: once its next
    /// attempt is answered (the lease is its own, or it waits on that
    /// attempt's wakeup instead), this one is dropped without a call.
    /// `withdraw` runs after the signal is dropped.
    ///
    /// A writer that waits for readers stands in front of the readers that
    /// come after it (a claim, an intent: writers are never starved), and
    /// this process's release wakes the writer before them. Leaving, it
    /// must take its claim back and wake them, or they sleep on, while
    /// only readers hold the name, until their nap ends: the last writer's
    /// TTL, for a reader that tried while a writer held the name. The
    /// store kit's `Interest::into_wakeup` (feature `store-kit`) wakes the
    /// readers; `Interest::into_wakeup_withdrawing` takes a claim back
    /// first.
    #[must_use = "withdrawing returns the wakeup it sets up"]
    pub fn withdrawing(mut self, withdraw: impl FnOnce() + Send + 'static) -> Self {
        self.withdraw = Some(Box::new(withdraw));
        self
    }
}

impl Drop for Wakeup {
    fn drop(&mut self) {
        if let Some(withdraw) = self.withdraw.take() {
            // The signal first: a store's registration of this waiter is
            // gone by the time `withdraw` looks at who else waits.
            self.signal = Signal::Gone;
            withdraw();
        }
    }
}

impl Future for Wakeup {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.poll_woken(cx).map(|_| ())
    }
}

impl fmt::Debug for Wakeup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Wakeup")
    }
}

/// What woke a waiter: reported by a wakeup from an in-process store
/// ([`Wakeup::reporting`]); any other wakeup only ever reports
/// [`Released`](Woken::Released).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Woken {
    /// The key was released (or may have been): try again.
    Released,
    /// The release handed the lease to this waiter, under the token and TTL
    /// of the attempt that registered it, starting at `since` (on tokio's
    /// clock), with this fencing token when the attempt asked for one.
    Granted { fence: Option<u64>, since: Instant },
}

/// For in-process stores, and for [`Lock`](crate::Lock) reading what they
/// report.
impl Wakeup {
    /// A wakeup that says what woke it (see [`Woken`]): for a store that
    /// may hand the lease straight to the waiter, as asked by
    /// [`Local::grant`](super::local::Local).
    pub(crate) fn reporting(signal: impl Future<Output = Woken> + Send + 'static) -> Self {
        Wakeup {
            signal: Signal::Reporting(Box::pin(signal)),
            woken: None,
            pass_on: None,
            withdraw: None,
        }
    }

    /// Its waiter went on: its next attempt was answered, and it holds the
    /// lease or waits on that attempt's wakeups. Dropped, this wakeup then
    /// withdraws nothing ([`Wakeup::withdrawing`]).
    pub(crate) fn answered(&mut self) {
        self.withdraw = None;
    }

    /// Polls for what woke the waiter; the same answer again once woken.
    pub(crate) fn poll_woken(&mut self, cx: &mut Context<'_>) -> Poll<Woken> {
        if let Some(woken) = self.woken {
            return Poll::Ready(woken);
        }
        let woken = match &mut self.signal {
            Signal::Released(signal) => {
                std::task::ready!(signal.as_mut().poll(cx));
                Woken::Released
            }
            Signal::Reporting(signal) => std::task::ready!(signal.as_mut().poll(cx)),
            Signal::Gone => return Poll::Pending,
        };
        self.woken = Some(woken);
        Poll::Ready(woken)
    }

    /// What woke the waiter, if anything has yet, without waiting. Leaves
    /// a waker that does nothing in its place: for a wakeup that is about to
    /// be replaced or dropped.
    pub(crate) fn woken_now(&mut self) -> Option<Woken> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match self.poll_woken(&mut cx) {
            Poll::Ready(woken) => Some(woken),
            Poll::Pending => None,
        }
    }

    /// The lease, if a release has handed it to this waiter already (see
    /// [`woken_now`](Wakeup::woken_now)).
    ///
    /// A signal that can only say "released" is never polled here: it
    /// cannot report a handover, and polling it would consume a wake-up
    /// that, unconsumed, passes on to the next waiter of the key when this
    /// wakeup is dropped (tokio's `Notify` forwards an unreceived
    /// `notify_one`). That next waiter is often this waiter's own new round.
    pub(crate) fn granted(&mut self) -> Option<Woken> {
        if self.woken.is_none() && matches!(self.signal, Signal::Released(_)) {
            return None;
        }
        self.woken_now()
            .filter(|woken| matches!(woken, Woken::Granted { .. }))
    }
}

/// The wakeups that woke a waiter whose next attempt is under way: if it
/// leaves before that attempt is answered, each passes its wake on
/// ([`Wakeup::new`]) instead of taking it along, and withdraws what it
/// stood for ([`Wakeup::withdrawing`]).
pub(crate) struct Unanswered(Vec<Wakeup>);

impl Unanswered {
    #[inline]
    pub(crate) fn new(wakeups: Vec<Wakeup>) -> Self {
        Unanswered(wakeups)
    }

    /// The attempt was answered: the wakeups, to read and drop, passing
    /// nothing on and withdrawing nothing.
    #[inline]
    pub(crate) fn answered(mut self) -> Vec<Wakeup> {
        let mut wakeups = std::mem::take(&mut self.0);
        wakeups.iter_mut().for_each(Wakeup::answered);
        wakeups
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        for mut wakeup in self.0.drain(..) {
            if let (Some(Woken::Released), Some(pass_on)) = (wakeup.woken, wakeup.pass_on.take()) {
                pass_on();
            }
        }
    }
}
