//! Taking a lock: rounds of attempts on its permits and, between rounds, a
//! wait for a release, a handover or the holder's expiry, until the lease
//! is ours or the wait is over.
//!
//! Each step is a small function, and [`acquire`] runs them in turn:
//!
//! ```text
//! start --> Attempt --every permit held--> Wait --the wait is over--> Contended
//!            |   ^                          | |
//!            |   +---- woken, or napped ----+ |
//!            |                                |
//!            +------> Granted <--handed over--+
//!   a permit was free, or the last
//!   round's wakeup handed the lease over
//! ```
//!
//! The future may be dropped at any `.await`. While an attempt is in
//! flight, [`InFlight`] gives back the lease it may have taken. A wait
//! polls only the wakeups its own round registered (an earlier round's
//! signal, polled, could swallow the notification meant for the new one);
//! the one look back, for a lease handed over meanwhile, never consumes a
//! plain release signal. Every deadline is a [`tokio::time::Instant`], so
//! tests on a paused clock wait as real time would.
//!
//! A round's wakeups go once the next round is answered, or the lease is
//! ours, marked [answered](Wakeup::answered); dropped any other way (the
//! wait ran out, an attempt failed, the future was dropped), each
//! withdraws what its attempt left standing for the waiter, as its store
//! asked ([`Wakeup::withdrawing`]): a waiting writer's claim on the
//! readers' turn.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::giveback::{GiveBack, give_back};
use crate::key::permit_key;
use crate::lease::{LockId, local_deadline};
use crate::metrics::Labels;
use crate::store::{AcquireRequest, Attempt, Unanswered, Wakeup, Woken, store_ttl};
use crate::{Error, LockGuard, LockManager, LockOptions, LockStore, Result, token};

/// What one acquisition came to.
pub(crate) enum Outcome {
    Acquired(LockGuard),
    /// Held by somebody else for the whole wait; their lease had this left,
    /// when the store said.
    Contended(Option<Duration>),
}

/// A lock as taking it (and supervising its work) reads it: all of a
/// [`Lock`](crate::Lock) but where the name starts in its key. The lock
/// keeps it and lends it out whole, checked.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) manager: LockManager,
    /// The prefix, then the name: one allocation per lock. A semaphore's
    /// key, not one of its permits'.
    pub(crate) key: Arc<str>,
    /// How long a lease lasts, as given (before rounding to the store's).
    pub(crate) ttl: Duration,
    /// How long to wait for a holder to let go.
    pub(crate) wait: Duration,
    pub(crate) options: LockOptions,
}

impl Target {
    /// Which lock this is, for re-entry: its manager's store and its key.
    pub(crate) fn id(&self) -> LockId {
        LockId::new(self.manager.store(), &self.key)
    }
}

/// Takes the lock `target`, the first attempt sent at `started` (just read
/// from the clock), its guard labelled `labels`.
pub(crate) async fn acquire(target: &Target, labels: Labels, started: Instant) -> Result<Outcome> {
    acquire_as(target, labels, started, token::new_token(), false).await
}

/// [`acquire`] under `token`, made by the caller. For an election's
/// `candidate` (its token carries its label and the time it was made), the
/// lease is announced to observers, and the acquire waits once at most: it
/// ends [`Contended`](Outcome::Contended) when the wait is over, never
/// handed the lease by a release, so that the candidate tries again under
/// a token made then, and its term's start says when the lease became its.
pub(crate) async fn acquire_as(
    target: &Target,
    labels: Labels,
    started: Instant,
    token: Arc<str>,
    candidate: bool,
) -> Result<Outcome> {
    // One key per permit; a plain lock (one permit) is its own key.
    let permits: Vec<Arc<str>>;
    let slots: &[Arc<str>] = if target.options.permits > 1 {
        permits = (0..target.options.permits)
            .map(|slot| permit_key(&target.key, slot))
            .collect();
        &permits
    } else {
        std::slice::from_ref(&target.key)
    };
    let mut rounds = Rounds::new(target, slots, &token, started);
    if candidate {
        rounds.attempts.request.announce = true;
        rounds.attempts.request.local.grant = false;
        rounds.once = true;
    }
    let mut step = Step::Attempt;
    let grant = loop {
        step = match step {
            Step::Attempt => rounds.attempt().await?,
            Step::Wait { shortest } => rounds.wait(shortest).await,
            Step::Granted(grant) => break grant,
            Step::Contended(remaining) => return Ok(Outcome::Contended(remaining)),
        };
    };
    // The lease is ours: the last round's wakeups (other permits', or a
    // handover's) go without withdrawing anything.
    rounds.wakeups.iter_mut().for_each(Wakeup::answered);
    // Read from the rounds rather than the arguments, so that the future
    // keeps no second copy of them across every await.
    let (target, started) = (rounds.target, rounds.started);
    Ok(acquired(target, grant, token, started, labels))
}

/// Where an acquire stands between two steps.
enum Step<'a> {
    /// Try each permit once: a round.
    Attempt,
    /// Every permit was held, the lease with the least left for `shortest`
    /// (when the store said): wait for a release, a handover or that
    /// expiry, then try again, unless the wait is over.
    Wait { shortest: Option<Duration> },
    /// The lease is ours.
    Granted(Grant<'a>),
    /// Held by somebody else for the whole wait.
    Contended(Option<Duration>),
}

/// A lease that became ours.
struct Grant<'a> {
    /// Its key: the permit's (the lock's own for a plain lock).
    slot: &'a Arc<str>,
    fence: Option<u64>,
    /// The lease started at or after this, on tokio's clock.
    since: Instant,
}

/// An acquire under way: what each round sends, and what the last round
/// registered to be woken by. Its keys (`'k`) outlive it and the token
/// (`'t`), which the guard takes over once the lease is ours.
struct Rounds<'k, 't> {
    target: &'k Target,
    /// The key of each permit.
    slots: &'k [Arc<str>],
    attempts: Attempts<'k, 't>,
    /// The last round's registrations, read by the next wait (and by the
    /// next round, for a lease handed over meanwhile).
    wakeups: Vec<Wakeup>,
    started: Instant,
    /// Wait once at most: an election candidate's acquire.
    once: bool,
}

/// What each attempt sends, and what giving back a lease it took needs.
struct Attempts<'k, 't> {
    store: &'k Arc<dyn LockStore>,
    token: &'t Arc<str>,
    /// The TTL, rounded up to what the store keeps.
    ttl: Duration,
    /// The request each attempt of the next round sends, on its own key.
    request: AcquireRequest<'t>,
}

impl<'k: 't, 't> Rounds<'k, 't> {
    /// Always inlined, like [`acquired`]: this runs on every acquire.
    #[inline(always)]
    fn new(
        target: &'k Target,
        slots: &'k [Arc<str>],
        token: &'t Arc<str>,
        started: Instant,
    ) -> Self {
        let store = target.manager.store();
        let ttl = store_ttl(target.ttl, &**store);
        let mut request = AcquireRequest::sent_at(&target.key, token, ttl, started);
        request.wake = !target.wait.is_zero();
        request.fenced = target.options.fenced;
        request.read = target.options.read;
        // A single lease to wait for: the store may hand it over on release.
        request.local.grant = request.wake && slots.len() == 1;
        Rounds {
            target,
            slots,
            attempts: Attempts {
                store,
                token,
                ttl,
                request,
            },
            wakeups: Vec::new(),
            started,
            once: false,
        }
    }

    /// One round: each permit once, until one is ours.
    async fn attempt(&mut self) -> Result<Step<'k>> {
        let slots = self.slots;
        // The permits in a random rotation, so waiters spread over them
        // instead of all trying the first.
        let first = if slots.len() > 1 {
            rand::random_range(0..slots.len())
        } else {
            0
        };
        let mut shortest: Option<Duration> = None;
        // The last round's registrations stay until this round's are
        // made: a store that listens per key keeps listening between
        // attempts instead of stopping and starting again each time.
        // Until this round is answered, a wake they brought is passed on if
        // the acquire is dropped or fails: it was meant for a waiter that
        // would try, and others of this process may be asleep behind it.
        // (`None` on the first round, which has none.)
        let previous =
            (!self.wakeups.is_empty()).then(|| Unanswered::new(std::mem::take(&mut self.wakeups)));
        for offset in 0..slots.len() {
            let slot = &slots[(first + offset) % slots.len()];
            // The store's clock starts the lease at or after `request.sent`,
            // so deadlines counted from it are never later than the store's.
            // (`if let`: what the store said at once is dropped before the
            // `else`, so the future keeps no room for it across the await.)
            let attempt = if let Some(now) = self.attempts.now(slot) {
                now?
            } else {
                self.attempts.send(slot).await?
            };
            match attempt {
                Attempt::Acquired { fence } => {
                    drop(previous.map(Unanswered::answered));
                    let since = self.attempts.request.sent;
                    return Ok(Step::Granted(Grant { slot, fence, since }));
                }
                Attempt::Held { remaining, wakeup } => {
                    if let Some(remaining) = remaining {
                        shortest = Some(shortest.map_or(remaining, |s| s.min(remaining)));
                    }
                    self.wakeups.extend(wakeup);
                }
            }
        }
        // A release may have handed the lease to last round's waiter
        // meanwhile: ours, then, rather than given back to pass on.
        let handed = previous
            .map(Unanswered::answered)
            .filter(|_| self.attempts.request.local.grant)
            .into_iter()
            .flatten()
            .find_map(|mut w| w.granted());
        if let Some(Woken::Granted { fence, since }) = handed {
            let slot = &self.target.key;
            return Ok(Step::Granted(Grant { slot, fence, since }));
        }
        Ok(Step::Wait { shortest })
    }

    /// Between rounds: sleeps until a release wakes us, the holder's lease
    /// runs out, or the wait is over.
    async fn wait(&mut self, shortest: Option<Duration>) -> Step<'k> {
        // `None`: a wait too long to represent, which is waiting for good.
        let left = match self.started.checked_add(self.target.wait) {
            Some(deadline) => deadline.saturating_duration_since(Instant::now()),
            None => Duration::MAX,
        };
        if left.is_zero() {
            tracing::debug!(
                key = %self.target.key,
                waited_us = self.started.elapsed().as_micros() as u64,
                holder_remaining_ms = shortest.map(|d| d.as_millis() as u64),
                "lock contended"
            );
            return Step::Contended(shortest);
        }
        // A store reports the remaining TTL whenever we wait; if one
        // does not, our own TTL bounds the holder's.
        let nap = nap_until_expiry(shortest.unwrap_or(self.target.ttl)).min(left);
        let woken = if self.wakeups.is_empty() {
            tokio::time::sleep(nap).await;
            None
        } else {
            tokio::select! {
                woken = any_of(&mut self.wakeups) => Some(woken),
                // A release may have handed the lease over just as the
                // nap ended: take it rather than try again.
                () = tokio::time::sleep(nap) => if self.attempts.request.local.grant {
                    self.wakeups.iter_mut().find_map(Wakeup::granted)
                } else {
                    None
                },
            }
        };
        if let Some(Woken::Granted { fence, since }) = woken {
            // Handed over by the release, under this attempt's token:
            // a single permit, so the lock's own key.
            let slot = &self.target.key;
            return Step::Granted(Grant { slot, fence, since });
        }
        if self.once {
            return Step::Contended(shortest);
        }
        self.attempts.request.sent = Instant::now();
        Step::Attempt
    }
}

impl<'k: 't, 't> Attempts<'k, 't> {
    /// This round's request, on the permit keyed `slot`.
    fn request_on(&self, slot: &'t Arc<str>) -> AcquireRequest<'t> {
        AcquireRequest {
            key: slot,
            local: self.request.local.with_key(slot),
            ..self.request
        }
    }

    /// This round's request on the permit keyed `slot`, answered at once
    /// when the store can do without I/O (memory).
    #[inline]
    fn now(&self, slot: &'t Arc<str>) -> Option<Result<Attempt>> {
        self.store.acquire_now(self.request_on(slot))
    }

    /// Sends this round's request on the permit keyed `slot` to a store that
    /// answers over I/O.
    async fn send(&self, slot: &'t Arc<str>) -> Result<Attempt> {
        // From the moment the request may reach the store until its reply
        // is read, a lease under `token` may exist that only this future
        // knows of: if the future is dropped here, or the store fails, it
        // is given back.
        let in_flight = InFlight::new(self.store, slot, self.token, self.ttl);
        let attempt = self.store.acquire(self.request_on(slot)).await?;
        if let Attempt::Acquired { .. } = attempt {
            // A reply can come after the lease it reports ran out (replies
            // queued on a slow link): the lock may be someone else's by now.
            // No guard then; the lease, if it still exists, is given back
            // as the in-flight guard drops.
            let sent = self.request.sent;
            let answered = sent.elapsed();
            if Instant::now() >= local_deadline(sent, self.ttl, &**self.store) {
                drop(in_flight);
                return Err(late_reply(slot, answered, self.ttl));
            }
        }
        in_flight.landed();
        Ok(attempt)
    }
}

/// The guard for `grant`, a lease taken under `token`. Always inlined: the
/// uncontended acquire is counted in instructions (`scripts/instructions`),
/// and a call here cost it 66 of them.
#[inline(always)]
fn acquired(
    target: &Target,
    grant: Grant<'_>,
    token: Arc<str>,
    started: Instant,
    labels: Labels,
) -> Outcome {
    let Grant { slot, fence, since } = grant;
    tracing::debug!(
        key = %slot,
        waited_us = started.elapsed().as_micros() as u64,
        ?fence,
        "lock acquired"
    );
    let store = target.manager.store();
    let hold_until = target.options.at_least.and_then(|d| since.checked_add(d));
    Outcome::Acquired(LockGuard::new(
        Arc::clone(store),
        Arc::clone(slot),
        token,
        fence,
        target.options.read,
        since,
        store_ttl(target.ttl, &**store),
        hold_until,
        labels,
    ))
}

/// The error for a reply that came `answered` after its request, when the
/// lease of `ttl` it reports had already run out.
#[cold]
fn late_reply(slot: &str, answered: Duration, ttl: Duration) -> Error {
    Error::Store {
        operation: "acquire",
        key: slot.to_owned(),
        source: format!(
            "the store answered after {answered:?}, when the lease of {ttl:?} had already run out; the lease was given back: use a longer ttl, or find why the store answers this slowly"
        )
        .into(),
    }
}

/// Gives back, when dropped armed, the lease an acquire in flight may have
/// taken: between sending an acquire and reading its reply, only this future
/// knows the token, so nobody else could ever release that lease before its
/// TTL.
struct InFlight<'a> {
    store: &'a Arc<dyn LockStore>,
    key: &'a Arc<str>,
    token: &'a Arc<str>,
    /// The TTL asked for: how long a lease the acquire took can last.
    ttl: Duration,
    armed: bool,
}

impl<'a> InFlight<'a> {
    fn new(
        store: &'a Arc<dyn LockStore>,
        key: &'a Arc<str>,
        token: &'a Arc<str>,
        ttl: Duration,
    ) -> Self {
        InFlight {
            store,
            key,
            token,
            ttl,
            armed: true,
        }
    }

    /// The store answered: what it holds now is accounted for by the caller.
    fn landed(mut self) {
        self.armed = false;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            give_back(
                self.store,
                self.key,
                self.token,
                None,
                self.ttl,
                GiveBack::AbandonedAcquire,
            );
        }
    }
}

/// Resolves when any of `wakeups` does, with what woke it.
async fn any_of(wakeups: &mut [Wakeup]) -> Woken {
    std::future::poll_fn(|cx| {
        for wakeup in wakeups.iter_mut() {
            if let std::task::Poll::Ready(woken) = wakeup.poll_woken(cx) {
                return std::task::Poll::Ready(woken);
            }
        }
        std::task::Poll::Pending
    })
    .await
}

/// How long to sleep when the holder's lease has `remaining` left and no
/// release wakes us first: until it runs out, plus a little jitter so many
/// waiters do not retry in the same instant.
fn nap_until_expiry(remaining: Duration) -> Duration {
    const FLOOR: Duration = Duration::from_micros(100);
    let spread = (remaining / 16).clamp(Duration::from_millis(1), Duration::from_millis(25));
    let jitter = spread.mul_f64(rand::random::<f64>());
    remaining.saturating_add(FLOOR).saturating_add(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nap_outlasts_the_holder_by_a_bounded_jitter() {
        for remaining in [
            Duration::ZERO,
            Duration::from_millis(3),
            Duration::from_secs(60),
        ] {
            let nap = nap_until_expiry(remaining);
            assert!(nap > remaining, "{nap:?} must outlast {remaining:?}");
            assert!(
                nap <= remaining + Duration::from_millis(26),
                "{nap:?} oversleeps {remaining:?}"
            );
        }
        assert_eq!(
            nap_until_expiry(Duration::MAX),
            Duration::MAX,
            "saturates, never panics"
        );
    }
}
