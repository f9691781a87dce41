//! [`Term`]: the view of a term that [`Election::lead`](crate::Election::lead)
//! hands its work, which the work may drop, clone or ignore.

use std::fmt;

use crate::lease::Lease;

/// This candidate's current term as leader, as the work that
/// [`Election::lead`](crate::Election::lead) runs sees it: its number (a
/// fencing token) and a signal when it ends.
///
/// `lead` keeps the term's [`Leadership`](crate::Leadership) itself and
/// hands the work this view of it. Dropping a `Term` does nothing: work
/// that ignores it runs as long as work that uses it, and leadership ends
/// only when it is lost or the work returns. Cheap to clone, `Send`,
/// `Sync` and `'static`: hand a clone to each task the leader spawns, so
/// that each can stop when [`lost`](Term::lost) resolves.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::LockManager;
///
/// let locks = LockManager::memory();
/// let election = locks.election("indexer", Duration::from_secs(15));
/// let compacted = election
///     .lead(|term| async move {
///         // A task of its own: `lead` drops the work when leadership
///         // ends, not the tasks it spawned, so this one stops itself.
///         let heartbeat = tokio::spawn({
///             let term = term.clone();
///             async move {
///                 tokio::select! {
///                     () = term.lost() => {}
///                     () = beat(term.number()) => {}
///                 }
///             }
///         });
///         let compacted = compact(term.number()).await;
///         heartbeat.abort();
///         Ok::<_, lock_core::Error>(compacted)
///     })
///     .await?;
/// assert_eq!(compacted, 3);
/// # Ok(()) }
/// # async fn beat(_term: u64) { std::future::pending().await }
/// # async fn compact(_term: u64) -> u32 { 3 }
/// ```
#[derive(Clone)]
pub struct Term {
    number: u64,
    lease: Lease,
}

impl fmt::Debug for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Term")
            .field("key", &self.lease.key())
            .field("number", &self.number)
            .field("lost", &self.lease.is_lost())
            .finish()
    }
}

impl Term {
    /// The view of the term whose number is `number` and whose lease is
    /// `lease`.
    pub(super) fn new(number: u64, lease: Lease) -> Term {
        Term { number, lease }
    }

    /// The term's number: [`Leadership::term`](crate::Leadership::term),
    /// the lease's fencing token, strictly greater than every earlier
    /// leader's. Pass it with every write the leader makes to a resource
    /// that refuses terms below the highest it has seen.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The store key of the leader's lease.
    pub fn key(&self) -> &str {
        self.lease.key()
    }

    /// True once the term has ended: lost (found gone by a renewal, or
    /// past its local deadline unrenewed), or resigned as the work
    /// returned.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// Resolves when the term ends, for any reason: no later than the
    /// lease's local deadline, which passes before the store could let
    /// another candidate lead. `lead` drops its work then; tasks the work
    /// spawned should stop too.
    pub async fn lost(&self) {
        self.lease.lost().await;
    }
}
