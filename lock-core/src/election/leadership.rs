//! [`Leadership`]: a term as leader, renewed in the background until it is
//! resigned or lost.

use std::fmt;

use tokio::sync::oneshot;

use crate::acquire::Target;
use crate::lease::Lease;
use crate::store::store_ttl;
use crate::{Error, LockGuard, Result, supervise};

/// The renewal task of a term: it ends once the lease has been given back.
pub(super) type Kept = tokio::task::JoinHandle<()>;

/// What [`Leadership::resign`] sends the renewal task: where to say
/// whether the lease was still ours when it was given back.
type Resign = oneshot::Sender<Result<bool>>;

/// This candidate's term as leader: proof that it leads, until
/// [`lost`](Leadership::lost) resolves.
///
/// Returned by [`Election::campaign`](crate::Election::campaign). While it
/// lives, a task renews the lease every `ttl / 3`. Leadership ends when it
/// is [resigned](Leadership::resign) or dropped (the lease is given back at
/// once, and the next candidate leads within a round trip or two; after a
/// drop, by a background task: before the process exits, resign instead,
/// or a runtime shutting down may leave the lease to its TTL), or when
/// it is lost: a renewal finds the lease gone, or the lease's local
/// deadline passes unrenewed (a store that stopped answering, a process
/// paused past its TTL). [`lost`](Leadership::lost) resolves then, before
/// the store could let anyone else lead.
///
/// [`Election::lead`](crate::Election::lead) keeps its `Leadership` to
/// itself and hands the work a [`Term`](crate::Term), which the work may
/// drop without resigning.
#[must_use = "dropping a Leadership resigns at once; hold it for as long as this candidate should lead"]
pub struct Leadership {
    lease: Lease,
    term: u64,
    /// Dropped (or sent on) to resign: the renewal task gives the lease
    /// back.
    resign: Option<oneshot::Sender<Resign>>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("key", &self.lease.key())
            .field("term", &self.term)
            .field("lost", &self.lease.is_lost())
            .finish()
    }
}

impl Leadership {
    /// Starts the term `guard` holds: a task renews it until it is
    /// resigned or lost.
    pub(super) fn start(target: Target, mut guard: LockGuard) -> Result<(Leadership, Kept)> {
        let Some(term) = guard.fence() else {
            // A store that says it fences gave no token: no term to fence
            // with. The guard, dropped, gives the lease back.
            return Err(Error::FencingUnsupported {
                key: target.key.to_string(),
            });
        };
        let ttl = store_ttl(target.ttl, &**target.manager.store());
        let lease = guard.lease(ttl, target.id());
        let (resign, resigned) = oneshot::channel();
        let kept = tokio::spawn(keep(target, guard, lease.clone(), resigned));
        let leadership = Leadership {
            lease,
            term,
            resign: Some(resign),
        };
        Ok((leadership, kept))
    }

    /// This term: the lease's fencing token, strictly greater than every
    /// earlier leader's. Pass it with every write the leader makes to a
    /// resource that refuses terms below the highest it has seen.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The store key of the leader's lease.
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// True once leadership has ended: resigned, found gone by a renewal,
    /// or past its local deadline unrenewed.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Resolves when leadership ends, for any reason: no later than the
    /// lease's local deadline, which passes before the store could let
    /// another candidate lead. Stop acting as leader then.
    pub async fn lost(&self) {
        self.lease.lost().await;
    }

    /// The lease, shared with the [`Term`](crate::Term) that
    /// [`Election::lead`](crate::Election::lead) hands its work.
    pub(super) fn lease(&self) -> Lease {
        self.lease.clone()
    }

    /// Stops leading and gives the lease back at once, so the next
    /// candidate leads without waiting out the TTL.
    ///
    /// `Ok(true)`: the lease was still ours and is now free. `Ok(false)`:
    /// leadership had already been lost.
    ///
    /// # Errors
    ///
    /// [`Error::Store`] when the store cannot be reached. Leadership has
    /// ended all the same ([`lost`](Leadership::lost) has resolved), and
    /// the give-back is tried again in the background until the store
    /// answers or the TTL passes.
    pub async fn resign(mut self) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        let sent = self
            .resign
            .take()
            .is_some_and(|resign| resign.send(reply).is_ok());
        if !sent {
            // The renewal task is gone: leadership was lost and given back.
            return Ok(false);
        }
        // A task gone before answering lost the lease meanwhile.
        answer.await.unwrap_or(Ok(false))
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        // Dropping the sender resigns: the renewal task sees it and gives
        // the lease back. Leadership ends here, for whoever still watches.
        if self.resign.take().is_some() {
            self.lease.mark_lost();
        }
    }
}

/// What ended a term, as the renewal task saw it.
enum Ended {
    /// Resigned, with somewhere to say how the give-back went (none when
    /// the leadership was dropped).
    Resigned(Option<Resign>),
    /// Lost: a renewal found the lease gone, or its deadline passed.
    Lost,
}

/// The renewal task of one term: renews the lease every `ttl / 3` until it
/// is resigned or lost, then gives it back and tells this process's
/// observers.
async fn keep(
    target: Target,
    mut guard: LockGuard,
    lease: Lease,
    resigned: oneshot::Receiver<Resign>,
) {
    let ended = tokio::select! {
        biased;
        resign = resigned => Ended::Resigned(resign.ok()),
        () = supervise::watch(&target, &guard, &lease) => Ended::Lost,
    };
    // Leadership ends before the lease is given back: work watching
    // `lost()` stops before anyone else can lead.
    lease.mark_lost();
    let key = &target.key;
    let given_back = match ended {
        Ended::Resigned(reply) => {
            let released = guard.give_back().await;
            match reply {
                Some(reply) => {
                    let failed = released
                        .as_ref()
                        .err()
                        .map(|error| error.chain().to_string());
                    // Nobody waits for the answer any more: say it here.
                    if let Err(Err(_)) = reply.send(released) {
                        if let Some(error) = failed {
                            tracing::warn!(key = %key, error = %error, "could not give back a resigned leadership; trying again in the background");
                        }
                    }
                    None
                }
                None => Some(released),
            }
        }
        Ended::Lost => {
            tracing::warn!(key = %key, held_ms = guard.held_for().as_millis() as u64, "leadership lost: its lease was found gone, or passed its deadline unrenewed");
            // The local deadline passes a clock margin before the store's:
            // the lease may still be ours, and the next leader need not
            // wait out the rest of it.
            Some(guard.give_back().await)
        }
    };
    if let Some(Err(error)) = given_back {
        tracing::warn!(key = %key, error = %error.chain(), "could not give back the leader's lease; trying again in the background until the store answers or its ttl passes");
    }
    super::announce(&**target.manager.store(), key);
}
