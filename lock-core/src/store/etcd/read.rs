//! The read side of a name on etcd, and what a writer does to be let in
//! ahead of new readers.
//!
//! A reader is a key of its own ([`keys::reader`]), on an etcd lease of its
//! own, so each reader expires alone and a release or extend touches only
//! its own key. Both acquires are one transaction that compares whole key
//! ranges:
//!
//! | acquire | when | then | else |
//! |---|---|---|---|
//! | writer | no writer key, no reader key | put the writer key; delete its own claim | read the writer, or one reader |
//! | reader | no writer key, no claim | put its reader key | read the writer, or one claim |
//!
//! A writer that waits while readers hold the name puts a claim: a key on
//! a short etcd lease of its own. New readers wait while any claim exists,
//! so a stream of overlapping readers cannot starve the writer: the
//! readers inside finish, the last one's delete wakes the writer, and it
//! gets in. The claim goes with the writer's wait: its transaction deletes
//! it when it gets the name; each round's claim is held by that round's
//! wakeup, which keeps its lease alive while the writer waits, so a writer
//! that gives up or is cancelled revokes it then; and a writer whose
//! process died leaves it to run out with its lease ([`CLAIM_SECONDS`], or
//! etcd's shortest lease). The writer waits for the last reader's release
//! as a plain waiter waits (the watch), not by trying again on a timer. A
//! writer waiting behind another writer puts no claim: when that writer
//! releases, new readers and the waiting writer race for the name, though
//! in one process the release wakes the waiting writer first.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};

use super::keys;
use super::leases::{Granted, revoke_later};
use crate::store::kit::{BoxError, Deadline, Interest, Waiters};

/// How long a waiting writer's claim outlives the writer's last attempt,
/// in seconds, unless the cluster's shortest lease is longer.
pub(super) const CLAIM_SECONDS: i64 = 2;

/// The transaction of a writer's attempt on `key`, under `token`, on
/// `lease`: the name is taken only while no writer and no reader holds it.
/// A writer that `waits` may have claimed the name: its claim goes as it
/// takes it.
pub(super) fn writer_put(key: &str, token: &str, lease: i64, waits: bool) -> Txn {
    let (readers, readers_end) = keys::readers(key);
    let mut then = vec![TxnOp::put(
        key,
        token,
        Some(PutOptions::new().with_lease(lease)),
    )];
    if waits {
        then.push(TxnOp::delete(keys::claim(key, token), None));
    }
    Txn::new()
        .when([
            Compare::create_revision(key, CompareOp::Equal, 0),
            Compare::create_revision(readers.clone(), CompareOp::Equal, 0)
                .with_range(readers_end.clone()),
        ])
        .and_then(then)
        .or_else(holders(key, readers, readers_end))
}

/// The transaction of a reader's attempt on `key`, under `token`, on
/// `lease`: it joins the readers while no writer holds the name and none
/// has claimed it.
pub(super) fn reader_put(key: &str, token: &str, lease: i64) -> Txn {
    let (claims, claims_end) = keys::claims(key);
    Txn::new()
        .when([
            Compare::create_revision(key, CompareOp::Equal, 0),
            Compare::create_revision(claims.clone(), CompareOp::Equal, 0)
                .with_range(claims_end.clone()),
        ])
        .and_then([TxnOp::put(
            keys::reader(key, token),
            token,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else(holders(key, claims, claims_end))
}

/// What an attempt that lost reads: the writer's key, then the first key
/// of the range `[start, end)` (a reader, or a claim), so the first key
/// found is the one holding the attempt off.
fn holders(key: &str, start: String, end: String) -> [TxnOp; 2] {
    [
        TxnOp::get(key, None),
        TxnOp::get(start, Some(GetOptions::new().with_range(end).with_limit(1))),
    ]
}

/// A waiting writer's claim on a name: while it lives, no new reader gets
/// in. Dropped, it revokes its lease, which deletes the claim unless a
/// later attempt of the same writer has moved the claim onto a lease of
/// its own (or its acquire deleted it).
pub(super) struct Claim {
    client: Client,
    lease: i64,
    seconds: i64,
    timeout: Duration,
    /// Keeps the lease alive while the writer waits.
    alive: tokio::task::AbortHandle,
}

impl Claim {
    /// Claims `key` for the writer waiting under `token`, on a fresh lease
    /// of `seconds`; `timeout` bounds giving the lease back.
    pub(super) async fn put(
        client: &Client,
        waiters: &Arc<Waiters>,
        key: &str,
        token: &str,
        seconds: i64,
        timeout: Duration,
    ) -> Result<Claim, BoxError> {
        // Given back if this is cut off before the claim is on it.
        let mut lease = Granted::new(client, seconds, timeout);
        lease.grant().await?;
        let options = PutOptions::new().with_lease(lease.id());
        client
            .clone()
            .put(keys::claim(key, token), token, Some(options))
            .await?;
        let lease = lease.keep();
        let (renewing, waiters, key) = (client.clone(), Arc::clone(waiters), key.to_owned());
        let alive = tokio::spawn(async move {
            keep_alive(renewing, lease, seconds, timeout).await;
            // The claim runs out: the writer tries again, and claims anew
            // while readers hold the name.
            waiters.released(&key);
        });
        Ok(Claim {
            client: client.clone(),
            lease,
            seconds,
            timeout,
            alive: alive.abort_handle(),
        })
    }
}

/// Keeps the claim's `lease` alive, renewing it every third of its
/// `seconds`, until aborted (the claim dropped), or until the lease is gone
/// or the cluster stops answering within `timeout`: then it returns, and
/// the waiting writer is woken to claim again.
async fn keep_alive(mut client: Client, lease: i64, seconds: i64, timeout: Duration) {
    let period = Duration::from_secs(seconds.max(1).unsigned_abs()) / 3;
    let deadline = || Deadline::after(timeout, "EtcdConfig::timeout");
    let Ok((mut keeper, mut answers)) = deadline().bound(client.lease_keep_alive(lease)).await
    else {
        return;
    };
    loop {
        tokio::time::sleep(period).await;
        let renewed = deadline()
            .bound(async {
                keeper.keep_alive().await?;
                answers.message().await
            })
            .await;
        match renewed {
            Ok(Some(answer)) if answer.ttl() > 0 => {}
            _ => {
                tracing::debug!(lease, "etcd claim of a waiting writer no longer renewed");
                return;
            }
        }
    }
}

/// A waiter's release signal, holding the writer's claim for as long as
/// its wakeup lives: past the release that wakes it, until its next
/// attempt has claimed again or taken the name (the runtime keeps a
/// round's wakeups until the next round's attempts are made), or until it
/// stops waiting.
pub(super) struct Waiting {
    interest: Interest,
    _claim: Option<Claim>,
}

impl Waiting {
    pub(super) fn new(interest: Interest, claim: Option<Claim>) -> Self {
        Waiting {
            interest,
            _claim: claim,
        }
    }
}

impl Future for Waiting {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.interest).poll(cx)
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.alive.abort();
        revoke_later(&self.client, self.lease, Some(self.seconds), self.timeout);
    }
}
