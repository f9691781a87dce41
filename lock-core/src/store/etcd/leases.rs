//! The etcd leases behind locks, each accounted for from before its grant
//! is sent until a key is on it or it is handed back.
//!
//! Every acquire and extend grants an etcd lease first, then puts the key
//! on it in a transaction. Without care, any `.await` in between leaks
//! that lease for its whole TTL: a caller's timeout, a lost `select!` arm,
//! an aborted task, or a reply lost with its connection.
//!
//! ```text
//! acquire: grant(ttl) ──► lease 7 exists ──► txn "put key on 7"
//!                     ▲ dropped here: nobody knows lease 7; it lives ttl
//! ```
//!
//! So the store picks each lease's ID itself (random, 63 bits) before
//! sending the grant, and a [`Granted`] guard owns it: dropped before a key
//! is known to be on the lease, it hands the lease back in the background.
//!
//! - Dropped after its grant was sent but before the reply was read, the
//!   grant may be in flight still. The give-back grants the same ID itself,
//!   for the store's timeout, and leaves that lease to run out: while it
//!   exists the first grant cannot land ("lease already exists"); if that
//!   answer comes back to the give-back, the first grant did land, and it
//!   is revoked.
//! - Dropped after an acquire's transaction was sent, the lease is revoked:
//!   if the transaction landed, nobody holds the key it wrote, and revoking
//!   the lease deletes it; if it lands later, it fails (no such lease).
//! - Dropped after an extend's transaction was sent ([`ExtendSent`]), the
//!   key may be on either lease, so neither can simply go: a settling task
//!   finishes the extend itself if it has not landed, then revokes the
//!   lease the key left.
//!
//! A give-back the cluster does not answer is tried again, with a growing
//! pause, until it answers or the lease would have run out on its own.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, GetOptions, LeaseGrantOptions, PutOptions, Txn, TxnOp,
    TxnOpResponse,
};
use tokio::time::Instant;

use crate::store::kit::{Backoff, BoxError, CallError, Deadline};

/// Bounds of the pause between attempts at a give-back the cluster did
/// not answer.
const RETRY_MIN: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);

/// How long a give-back keeps trying for a lease whose TTL it does not
/// know (the lease a released key was on): longer leases run out on their
/// own after that.
const UNKNOWN_TTL: Duration = Duration::from_secs(3600);

/// What is known about a guarded lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Nothing to give back: its grant was not sent, or a key is on it.
    Settled,
    /// Its grant was sent and no reply read: it may or may not exist.
    Sent,
    /// It exists, and no key is known to be on it.
    Granted,
}

/// One lease this process grants, handed back when dropped unless
/// [`kept`](Granted::keep).
pub(super) struct Granted {
    client: Client,
    id: i64,
    seconds: i64,
    timeout: Duration,
    state: State,
}

impl Granted {
    /// A lease of `seconds`, not granted yet; `timeout` bounds each call
    /// made for it (the grant, and each attempt at giving it back).
    pub(super) fn new(client: &Client, seconds: i64, timeout: Duration) -> Self {
        Granted {
            client: client.clone(),
            id: new_id(),
            seconds,
            timeout,
            state: State::Settled,
        }
    }

    /// The lease's ID.
    pub(super) fn id(&self) -> i64 {
        self.id
    }

    /// Grants the lease; returns the cluster's revision at the grant. An ID
    /// somebody else's lease already has (a one-in-2⁶³ chance) is not ours
    /// to hand back: another is picked.
    pub(super) async fn grant(&mut self) -> Result<i64, BoxError> {
        loop {
            self.state = State::Sent;
            let options = LeaseGrantOptions::new().with_id(self.id);
            match self.client.lease_grant(self.seconds, Some(options)).await {
                Ok(granted) => {
                    self.state = State::Granted;
                    return Ok(granted.header().map_or(0, |header| header.revision()));
                }
                Err(e) if is_lease_exists(&e) => {
                    self.state = State::Settled;
                    self.id = new_id();
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// A key is on the lease now: whoever holds the key answers for it.
    pub(super) fn keep(mut self) -> i64 {
        self.state = State::Settled;
        self.id
    }
}

impl Drop for Granted {
    fn drop(&mut self) {
        let state = std::mem::replace(&mut self.state, State::Settled);
        if state == State::Settled {
            return;
        }
        let (client, id) = (self.client.clone(), self.id);
        let (seconds, timeout) = (self.seconds, self.timeout);
        let unsure = state == State::Sent;
        spawn(async move { give_back(client, id, unsure, seconds, timeout).await });
    }
}

/// Revokes `lease` (whose key is gone or moved) in the background, tried
/// again until the cluster answers or the lease has run out on its own
/// (its TTL is `seconds` at most, or unknown when `None`).
pub(super) fn revoke_later(client: &Client, lease: i64, seconds: Option<i64>, timeout: Duration) {
    if lease == 0 {
        return;
    }
    let client = client.clone();
    let seconds = seconds.unwrap_or(i64::try_from(UNKNOWN_TTL.as_secs()).unwrap_or(i64::MAX));
    spawn(async move { give_back(client, lease, false, seconds, timeout).await });
}

/// Runs `task` on the current runtime; outside one there is nothing to run
/// it on, and the lease's TTL frees it.
fn spawn(task: impl Future<Output = ()> + Send + 'static) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(task);
    }
}

/// Gives `id` back. When `unsure` whether its grant landed, first grants
/// the ID itself for `timeout`: if that works, the first grant had not
/// landed and cannot while this one lives, and this one runs out on its
/// own; if the ID exists already, the first grant landed and is revoked.
async fn give_back(mut client: Client, id: i64, unsure: bool, seconds: i64, timeout: Duration) {
    let mut retry = Retry::new(seconds);
    let mut exists = !unsure;
    loop {
        let deadline = Deadline::after(timeout, "EtcdConfig::timeout");
        if !exists {
            let hold = i64::try_from(timeout.as_secs().saturating_add(1)).unwrap_or(i64::MAX);
            let options = LeaseGrantOptions::new().with_id(id);
            match deadline
                .bound(client.lease_grant(hold, Some(options)))
                .await
            {
                Ok(_) => return,
                Err(CallError::Store(e)) if is_lease_exists(&e) => exists = true,
                Err(e) => {
                    if !retry.pause(id, &e.to_string()).await {
                        return;
                    }
                    continue;
                }
            }
        }
        match deadline.bound(client.lease_revoke(id)).await {
            Ok(_) => return,
            Err(CallError::Store(e)) if is_lease_not_found(&e) => return,
            Err(e) => {
                if !retry.pause(id, &e.to_string()).await {
                    return;
                }
            }
        }
    }
}

/// The pauses of a give-back, until the lease it gives back has run out
/// on its own.
struct Retry {
    backoff: Backoff,
    until: Option<Instant>,
}

impl Retry {
    fn new(seconds: i64) -> Self {
        let ttl = Duration::from_secs(seconds.max(1).unsigned_abs());
        Retry {
            // Never healthy: every failure grows the pause.
            backoff: Backoff::new(RETRY_MIN, RETRY_MAX, Duration::MAX),
            until: Instant::now().checked_add(ttl),
        }
    }

    /// Pauses before the next attempt; false once the lease has run out,
    /// when there is nothing left to give back.
    async fn pause(&mut self, lease: i64, error: &str) -> bool {
        if self.until.is_some_and(|until| Instant::now() >= until) {
            tracing::debug!(
                lease,
                error,
                "etcd lease give-back abandoned: its TTL has run out"
            );
            return false;
        }
        tracing::debug!(lease, error, "etcd lease give-back failed; trying again");
        tokio::time::sleep(self.backoff.next_pause()).await;
        true
    }
}

/// An extend whose transaction (put `key`, ours under `token`, on the new
/// lease) may have been sent: dropped before it is
/// [`answered`](ExtendSent::answered), it settles the extend in the
/// background, and the new lease's own guard gives nothing back.
pub(super) struct ExtendSent<'a> {
    new: &'a mut Granted,
    key: &'a str,
    token: &'a str,
    /// The cluster's revision when the new lease was granted: the key was
    /// last written at or before it, unless this extend (or another) has
    /// landed since.
    granted_at: i64,
    armed: bool,
}

impl<'a> ExtendSent<'a> {
    /// The extend of `key` under `token` onto `new`, granted at revision
    /// `granted_at`, is about to send its transaction.
    pub(super) fn new(new: &'a mut Granted, key: &'a str, token: &'a str, granted_at: i64) -> Self {
        ExtendSent {
            new,
            key,
            token,
            granted_at,
            armed: true,
        }
    }

    /// The transaction's answer was read: the new lease's guard decides
    /// again (kept if the key is on it, given back if not).
    pub(super) fn answered(mut self) {
        self.armed = false;
    }
}

impl Drop for ExtendSent<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // The transaction may land, or may have: neither lease can simply
        // be revoked (either may carry the key). The settling task finds
        // out, and hands back the one the key is not on.
        self.new.state = State::Settled;
        let settle = Settle {
            client: self.new.client.clone(),
            key: self.key.to_owned(),
            token: self.token.to_owned(),
            new: self.new.id,
            granted_at: self.granted_at,
            seconds: self.new.seconds,
            timeout: self.new.timeout,
        };
        spawn(settle.run());
    }
}

struct Settle {
    client: Client,
    key: String,
    token: String,
    new: i64,
    granted_at: i64,
    seconds: i64,
    timeout: Duration,
}

impl Settle {
    /// Settles an extend cut off after its transaction was sent.
    ///
    /// If the key is still ours and untouched since the new lease was
    /// granted, the extend has not landed: this finishes it (puts the key
    /// on the new lease, so the one still in flight changes nothing if it
    /// lands) and revokes the lease the key was on. If the key is on the
    /// new lease, the extend landed: the lease it was on before is read
    /// from the key's previous version and revoked. If the key is not
    /// ours, the extend can never land, and the new lease goes.
    async fn run(self) {
        let mut retry = Retry::new(self.seconds);
        loop {
            match self.attempt().await {
                Ok(()) => return,
                Err(error) => {
                    if !retry.pause(self.new, &error.to_string()).await {
                        return;
                    }
                }
            }
        }
    }

    async fn attempt(&self) -> Result<(), BoxError> {
        let Settle {
            key, token, new, ..
        } = self;
        let deadline = Deadline::after(self.timeout, "EtcdConfig::timeout");
        let mut client = self.client.clone();
        let txn = Txn::new()
            .when([
                Compare::value(key.clone(), CompareOp::Equal, token.clone()),
                Compare::lease(key.clone(), CompareOp::NotEqual, *new),
                Compare::mod_revision(key.clone(), CompareOp::Less, self.granted_at + 1),
            ])
            .and_then([
                TxnOp::get(key.clone(), None),
                TxnOp::put(
                    key.clone(),
                    token.clone(),
                    Some(PutOptions::new().with_lease(*new)),
                ),
            ])
            .or_else([TxnOp::get(key.clone(), None)]);
        let answer = deadline.bound(client.txn(txn)).await.map_err(boxed)?;
        let now = found(answer.op_responses().as_slice());
        if answer.succeeded() {
            // Finished here: the key left the lease it was on.
            let old = now.map_or(0, |kv| kv.lease);
            if old != *new {
                revoke_later(&self.client, old, None, self.timeout);
            }
            return Ok(());
        }
        match now {
            Some(kv) if kv.value == token.as_bytes() && kv.lease == *new => {
                // Landed: the lease before it is in the key's previous
                // version (unless compaction took it; then it runs out).
                let options = GetOptions::new().with_revision(kv.mod_revision - 1);
                let before = deadline.bound(client.get(key.clone(), Some(options))).await;
                match before {
                    Ok(before) => {
                        let old = before
                            .kvs()
                            .first()
                            .filter(|kv| kv.value() == token.as_bytes())
                            .map_or(0, |kv| kv.lease());
                        if old != *new {
                            revoke_later(&self.client, old, None, self.timeout);
                        }
                    }
                    Err(CallError::Store(e)) if is_compacted(&e) => {
                        tracing::debug!(key, "etcd lease of a cut-off extend left to run out");
                    }
                    Err(e) => return Err(boxed(e)),
                }
            }
            Some(kv) if kv.value == token.as_bytes() => {
                // Moved on by another extend of the same lock since (extends
                // may run concurrently). Either this one landed first, and
                // that extend revoked the new lease as the one it moved the
                // key off, or this one may still land; revoking the new
                // lease then could delete the key, so it is left to run out.
                tracing::debug!(key, "etcd lease of a cut-off extend left to run out");
            }
            _ => revoke_later(&self.client, *new, Some(self.seconds), self.timeout),
        }
        Ok(())
    }
}

/// A key as a transaction's `get` read it.
pub(super) struct Found {
    pub(super) key: Vec<u8>,
    pub(super) value: Vec<u8>,
    pub(super) lease: i64,
    pub(super) mod_revision: i64,
}

/// The first `Get` among a transaction's responses.
pub(super) fn found(responses: &[TxnOpResponse]) -> Option<Found> {
    responses.iter().find_map(|response| match response {
        TxnOpResponse::Get(get) => get.kvs().first().map(|kv| Found {
            key: kv.key().to_vec(),
            value: kv.value().to_vec(),
            lease: kv.lease(),
            mod_revision: kv.mod_revision(),
        }),
        _ => None,
    })
}

/// A bounded etcd call's error, boxed (or the time-out, as text).
fn boxed(error: CallError<etcd_client::Error>) -> BoxError {
    match error {
        CallError::Store(error) => error.into(),
        timed_out => timed_out.to_string().into(),
    }
}

/// A fresh lease ID: positive, random, never 0 (which asks etcd to pick).
fn new_id() -> i64 {
    i64::try_from((rand::random::<u64>() >> 1).max(1)).unwrap_or(1)
}

/// The gRPC message of an etcd error, if it is one.
fn message(error: &etcd_client::Error) -> Option<&str> {
    match error {
        etcd_client::Error::GRpcStatus(status) => Some(status.message()),
        _ => None,
    }
}

/// etcd's `ErrGRPCLeaseExist`.
fn is_lease_exists(error: &etcd_client::Error) -> bool {
    message(error).is_some_and(|message| message.contains("lease already exists"))
}

/// etcd's `ErrGRPCLeaseNotFound`.
fn is_lease_not_found(error: &etcd_client::Error) -> bool {
    message(error).is_some_and(|message| message.contains("requested lease not found"))
}

/// etcd's `ErrGRPCCompacted`.
fn is_compacted(error: &etcd_client::Error) -> bool {
    message(error).is_some_and(|message| message.contains("compacted"))
}

#[cfg(test)]
mod tests {
    use super::new_id;

    #[test]
    fn a_lease_id_is_positive_so_etcd_never_picks_one_of_its_own() {
        // 0 asks etcd to choose the ID, which the guard would then not know.
        for _ in 0..10_000 {
            assert!(new_id() > 0, "lease IDs the store picks are positive");
        }
    }
}
