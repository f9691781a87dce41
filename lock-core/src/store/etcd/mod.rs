//! Leases on etcd: a consensus store, so a lease survives the loss of any
//! minority of members, and fencing tokens are the cluster's revisions.
//!
//! One job per file: [`config`] (the settings), [`connect`] (reaching the
//! cluster and reading its shortest lease), [`leases`] (each etcd lease
//! accounted for until a key is on it or it is given back), [`watch`] (the
//! one watch stream that wakes waiters); this file is the store and its
//! operations.

mod config;
mod connect;
mod leases;
pub(crate) mod url;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp};

pub use self::config::EtcdConfig;
use self::leases::{ExtendSent, Granted, found, revoke_later};
use self::watch::Watches;
use crate::store::kit::{self, Background, BoxError, CallError, Deadline, Waiters};
use crate::store::{AcquireRequest, Attempt, BoxFuture, LockStore, Wakeup};
use crate::{Error, Holder, Result};

/// Leases kept in etcd, shared by every process that reaches the cluster,
/// and kept by consensus.
///
/// ```no_run
/// # #[tokio::main] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::{EtcdStore, LockManager};
///
/// let store = EtcdStore::connect(&["http://10.0.0.1:2379", "http://10.0.0.2:2379"]).await?;
/// let locks = LockManager::new(store);
/// let ran = locks
///     .lock("nightly-export", Duration::from_secs(600))
///     .fenced()
///     .run(async {
///         let fence = lock_core::current().and_then(|lease| lease.fence());
///         // ... pass `fence` to the storage the export writes to ...
///         Ok::<_, lock_core::Error>(fence)
///     })
///     .await?;
/// # let _ = ran;
/// # Ok(()) }
/// ```
///
/// # The operations
///
/// | operation | etcd requests |
/// |---|---|
/// | acquire | grant an etcd lease with the TTL, then one transaction: `put key token` on that lease if the key does not exist (`create_revision == 0`), else read the holder; a waiting caller then reads the holder's lease TTL |
/// | release | one transaction: delete the key if its value is our token; then revoke its lease |
/// | extend | grant a lease with the new TTL, then one transaction: `put key token` on it if the value is still our token; then revoke the old lease |
/// | holder | read the key, then its lease's remaining TTL |
/// | list | a ranged read of the prefix, in pages of 1,000 pinned to one revision (a consistent snapshot), then each lease's remaining TTL |
///
/// Each lock has an etcd lease of its own, so each can have its own TTL and
/// a release frees exactly one key. A lease granted for an attempt that
/// loses is revoked at once, in the background; so is one whose acquire or
/// extend is cut off (a caller's timeout, a dropped future) at any point,
/// and a give-back the cluster does not answer is tried again until it
/// does. Two cases are left to run out instead of revoked, since revoking
/// could delete a held key: a grant whose answer was lost is blocked by a
/// lease of the same ID that lives for [`EtcdConfig::timeout`], and an
/// extend cut off while another extend of the same lock overtook it keeps
/// its new lease until that lease's TTL.
///
/// # Fencing tokens that survive failover
///
/// A lock's fencing token ([`fencing`](LockStore::fencing) is true) is the
/// cluster revision at which its acquire committed: strictly increasing,
/// cluster-wide, decided by consensus, so no failover can hand out a token
/// twice or go back.
///
/// # TTLs
///
/// Etcd keeps lease TTLs in whole seconds (the store rounds up), and no
/// shorter than its minimum, set by its election timeout (about 2 s with the
/// defaults): the store reads that minimum when it connects, and refuses
/// shorter TTLs with [`Error::InvalidTtl`]. A new leader extends leases
/// rather than shortening them, so a lease lasts at least its TTL across
/// elections too.
///
/// # Waiting
///
/// One watch stream per store, with a watch per key somebody in this process
/// waits for, from just after the revision at which the key was found held:
/// a delete (a release, a force-release, or the holder's lease running out)
/// wakes the key's waiters at once, with nothing missed between the attempt
/// and the watch. No polling. When the stream breaks (a member restarting,
/// a leader change) it is opened again after a growing pause, and each
/// watch resumes just after the last delete it delivered: waiters keep
/// waiting through the outage instead of being woken into attempts that
/// fail, and a release during it still wakes one.
///
/// # What etcd adds to [the guarantee](crate#the-guarantee-stated-honestly)
///
/// Consensus: an acquire that returned has been committed by a majority, so
/// no failover forgets a lease, and a minority side of a partition cannot
/// grant one. What consensus does not buy: a holder that pauses (a long GC,
/// a stopped VM) past its TTL still loses its lease while it believes it
/// holds it, exactly as on any store; fencing tokens, checked by the
/// storage the work writes to, are the defence.
#[derive(Clone)]
pub struct EtcdStore {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    watches: Watches,
    waiters: Arc<Waiters>,
    config: EtcdConfig,
    /// The shortest lease TTL the cluster grants.
    min_ttl: Duration,
    endpoints: Vec<String>,
    /// The watch stream's task: kept only to be dropped, which aborts it
    /// with the store.
    _tasks: Background,
}

impl EtcdStore {
    fn deadline(&self) -> Deadline {
        Deadline::after(self.shared.config.timeout, "EtcdConfig::timeout")
    }

    /// Runs `call` on a clone of the client within one deadline.
    async fn call<T, F, Fut>(&self, operation: &'static str, key: &str, call: F) -> Result<T>
    where
        F: FnOnce(Client) -> Fut,
        Fut: Future<Output = std::result::Result<T, BoxError>>,
    {
        self.deadline()
            .bound(call(self.shared.client.clone()))
            .await
            .map_err(|e| Error::store(operation, key, e.into_boxed()))
    }

    /// Revokes `lease` in the background: a lease nobody's key uses any
    /// more would otherwise live until its TTL.
    fn revoke_later(&self, lease: i64) {
        revoke_later(&self.shared.client, lease, None, self.shared.config.timeout);
    }

    /// The TTL to grant for `ttl`: whole seconds, rounded up.
    fn seconds(&self, ttl: Duration) -> i64 {
        let seconds = kit::store_ttl(ttl, self).as_secs();
        i64::try_from(seconds.max(1)).unwrap_or(i64::MAX)
    }
}

/// How many times an extend starts again on a fresh lease when another
/// write of the same lock (its own settling, or a concurrent extend) landed
/// between its grant and its transaction.
const EXTEND_TRIES: usize = 3;

impl LockStore for EtcdStore {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        Box::pin(async move {
            kit::check_lease(request.key, request.ttl, self)?;
            // Before the attempt, so the watch this waiter asks for below is
            // kept while it waits.
            let interest = request
                .wake
                .then(|| self.shared.waiters.register(request.key));
            let seconds = self.seconds(request.ttl);
            let (key, token, wake) = (request.key, request.token, request.wake);
            // Given back if this future is dropped before a key is known to
            // be on it, or if the attempt loses.
            let mut lease = Granted::new(&self.shared.client, seconds, self.shared.config.timeout);
            let mut client = self.shared.client.clone();
            let attempt = async {
                lease.grant().await?;
                let txn = Txn::new()
                    .when([Compare::create_revision(key, CompareOp::Equal, 0)])
                    .and_then([TxnOp::put(
                        key,
                        token,
                        Some(PutOptions::new().with_lease(lease.id())),
                    )])
                    .or_else([TxnOp::get(key, None)]);
                let answer = client.txn(txn).await?;
                let revision = answer.header().map_or(0, |header| header.revision());
                Ok::<_, BoxError>((
                    answer.succeeded(),
                    revision,
                    found(answer.op_responses().as_slice()),
                ))
            };
            // One deadline for the whole attempt, the holder's TTL included.
            let deadline = self.deadline();
            let failed = |e: CallError<BoxError>| Error::store("acquire", key, e.into_boxed());
            let (won, revision, holder) = deadline.bound(attempt).await.map_err(failed)?;
            if won {
                lease.keep();
            } else {
                // Nobody's: back now, not after the holder's TTL is read.
                drop(lease);
            }
            let holder = match holder {
                Some(holder) if !won && wake && holder.lease != 0 => {
                    let mut client = self.shared.client.clone();
                    let ttl = async {
                        Ok::<_, BoxError>(
                            client.lease_time_to_live(holder.lease, None).await?.ttl(),
                        )
                    };
                    Some(deadline.bound(ttl).await.map_err(failed)?)
                }
                _ => None,
            };
            if won {
                return Ok(Attempt::Acquired {
                    fence: request.fenced.then_some(revision.max(0).unsigned_abs()),
                });
            }
            if request.wake {
                // Watch from just after the revision it was found held at:
                // its delete cannot slip between this attempt and the watch.
                self.shared.watches.watch(request.key, revision + 1);
            }
            Ok(Attempt::Held {
                // The TTL's seconds are truncated: add one so a nap covers
                // it (the watch wakes the waiter at the delete anyway).
                remaining: holder.map(|ttl| Duration::from_secs(ttl.max(0).unsigned_abs() + 1)),
                wakeup: interest.map(Wakeup::new),
            })
        })
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let (key_owned, token_owned) = (key.to_owned(), token.to_owned());
            let (released, lease) = self
                .call("release", key, |mut client| async move {
                    let txn = Txn::new()
                        .when([Compare::value(
                            key_owned.clone(),
                            CompareOp::Equal,
                            token_owned,
                        )])
                        .and_then([
                            TxnOp::get(key_owned.clone(), None),
                            TxnOp::delete(key_owned, None),
                        ]);
                    let answer = client.txn(txn).await?;
                    let lease = found(answer.op_responses().as_slice()).map_or(0, |kv| kv.lease);
                    Ok::<_, BoxError>((answer.succeeded(), lease))
                })
                .await?;
            if released {
                self.revoke_later(lease);
                self.shared.waiters.released(key);
            }
            Ok(released)
        })
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        token: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            kit::check_lease(key, ttl, self)?;
            let seconds = self.seconds(ttl);
            let mut client = self.shared.client.clone();
            let extending = async {
                for _ in 0..EXTEND_TRIES {
                    // Given back if this future is dropped before the key is
                    // known to be on it, or if the key is not ours.
                    let mut lease =
                        Granted::new(&self.shared.client, seconds, self.shared.config.timeout);
                    let granted_at = lease.grant().await?;
                    // Only onto a key untouched since the grant: a copy of
                    // this transaction delayed in the cluster must never land
                    // after a later write (the background settling of a
                    // cut-off extend, another extend of this lock), or it
                    // would move the key back onto a lease that later write
                    // then revokes, deleting a key that is still held.
                    let txn = Txn::new()
                        .when([
                            Compare::value(key, CompareOp::Equal, token),
                            Compare::mod_revision(key, CompareOp::Less, granted_at + 1),
                        ])
                        .and_then([
                            TxnOp::get(key, None),
                            TxnOp::put(key, token, Some(PutOptions::new().with_lease(lease.id()))),
                        ])
                        .or_else([TxnOp::get(key, None)]);
                    // From here until its answer is read, the key may be on
                    // either lease: a cut-off extend is settled in the
                    // background.
                    let sent = ExtendSent::new(&mut lease, key, token, granted_at);
                    let answer = client.txn(txn).await?;
                    sent.answered();
                    let now = found(answer.op_responses().as_slice());
                    if answer.succeeded() {
                        let old = now.map_or(0, |kv| kv.lease);
                        return Ok::<_, BoxError>((Some(lease), old));
                    }
                    // Still ours, but written since the grant: try again on
                    // a fresh lease (this one is given back as it drops).
                    if now.is_none_or(|kv| kv.value != token.as_bytes()) {
                        return Ok((None, 0));
                    }
                }
                Err(format!(
                    "the lock's key was rewritten by another extend of it {EXTEND_TRIES} times running; try again"
                )
                .into())
            };
            let (extended, old_lease) = self
                .deadline()
                .bound(extending)
                .await
                .map_err(|e| Error::store("extend", key, e.into_boxed()))?;
            let Some(lease) = extended else {
                return Ok(false);
            };
            let new_lease = lease.keep();
            // The lease the key no longer uses goes now, not at its TTL.
            if old_lease != new_lease {
                self.revoke_later(old_lease);
            }
            Ok(true)
        })
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let key_owned = key.to_owned();
            let (released, lease) = self
                .call("force-release", key, |mut client| async move {
                    let answer = client
                        .delete(key_owned, Some(DeleteOptions::new().with_prev_key()))
                        .await?;
                    let lease = answer.prev_kvs().first().map_or(0, |kv| kv.lease());
                    Ok::<_, BoxError>((answer.deleted() > 0, lease))
                })
                .await?;
            if released {
                self.revoke_later(lease);
                self.shared.waiters.released(key);
            }
            Ok(released)
        })
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        Box::pin(async move {
            let key_owned = key.to_owned();
            self.call("read the holder of", key, |mut client| async move {
                let answer = client.get(key_owned, None::<GetOptions>).await?;
                let Some(kv) = answer.kvs().first() else {
                    return Ok(None);
                };
                let token = String::from_utf8_lossy(kv.value()).into_owned();
                let revision = kv.create_revision();
                holder_of(&mut client, token, kv.lease(), revision).await
            })
            .await
        })
    }

    /// One ranged read of the keys under `prefix`, in pages pinned to the
    /// first page's revision (one consistent snapshot), then each lease's
    /// remaining TTL.
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        Box::pin(async move {
            const OPERATION: &str = "list the locks under";
            const PAGE: i64 = 1000;
            let end = prefix_end(prefix.as_bytes());
            let mut start = if prefix.is_empty() {
                vec![0]
            } else {
                prefix.as_bytes().to_vec()
            };
            let mut revision = 0;
            let mut found = Vec::new();
            loop {
                let mut options = GetOptions::new().with_range(end.clone()).with_limit(PAGE);
                if revision > 0 {
                    options = options.with_revision(revision);
                }
                let from = std::mem::take(&mut start);
                let answer = self
                    .call(OPERATION, prefix, |mut client| async move {
                        Ok::<_, BoxError>(client.get(from, Some(options)).await?)
                    })
                    .await?;
                if revision == 0 {
                    revision = answer.header().map_or(0, |header| header.revision());
                }
                for kv in answer.kvs() {
                    let (Ok(key), Ok(token)) = (kv.key_str(), kv.value_str()) else {
                        continue;
                    };
                    found.push((
                        key.to_owned(),
                        token.to_owned(),
                        kv.lease(),
                        kv.create_revision(),
                    ));
                }
                match answer.kvs().last() {
                    Some(last) if answer.more() => {
                        start = last.key().to_vec();
                        start.push(0);
                    }
                    _ => break,
                }
            }
            let mut held = Vec::with_capacity(found.len());
            for batch in found.chunks(128) {
                let reads = batch.iter().map(|(_, token, lease, revision)| {
                    self.call(OPERATION, prefix, move |mut client| async move {
                        holder_of(&mut client, token.clone(), *lease, *revision).await
                    })
                });
                let holders = futures_util::future::join_all(reads).await;
                for ((key, ..), holder) in batch.iter().zip(holders) {
                    if let Some(holder) = holder? {
                        held.push((key.clone(), holder));
                    }
                }
            }
            Ok(held)
        })
    }

    fn name(&self) -> &'static str {
        "etcd"
    }

    fn is_shared(&self) -> bool {
        true
    }

    /// 100 years, far inside etcd's own limit on lease TTLs.
    fn max_ttl(&self) -> Duration {
        kit::MAX_TTL
    }

    fn min_ttl(&self) -> Duration {
        self.shared.min_ttl
    }

    /// Whole seconds: what etcd leases keep.
    fn ttl_resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn fencing(&self) -> bool {
        true
    }
}

/// The holder of a key read as `token` on `lease`, created at `revision`
/// (its fencing token): the lease's remaining TTL read now, or `None` when
/// it ran out since the key was read.
async fn holder_of(
    client: &mut Client,
    token: String,
    lease: i64,
    revision: i64,
) -> std::result::Result<Option<Holder>, BoxError> {
    let remaining = if lease == 0 {
        // No lease: written by something other than this library.
        Duration::MAX
    } else {
        let ttl = client.lease_time_to_live(lease, None).await?.ttl();
        if ttl < 0 {
            return Ok(None);
        }
        Duration::from_secs(ttl.unsigned_abs())
    };
    let holder = Holder::new(token, remaining);
    Ok(Some(match u64::try_from(revision) {
        Ok(fence) if fence > 0 => holder.with_fence(fence),
        _ => holder,
    }))
}

/// The end of the key range holding every key that starts with `prefix`:
/// the prefix with its last byte below 0xff raised by one; `[0]` (every
/// key from the start) when there is none.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("endpoints", &self.shared.endpoints)
            .field("config", &self.shared.config)
            .field("min_ttl", &self.shared.min_ttl)
            .field("waited_keys", &self.shared.waiters.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn the_range_of_a_prefix_ends_just_past_its_last_key() {
        assert_eq!(prefix_end(b"lock:"), b"lock;".to_vec());
        assert_eq!(
            prefix_end(b"a\xff\xff"),
            b"b".to_vec(),
            "0xff bytes roll over"
        );
        assert_eq!(prefix_end(b"\xff"), vec![0], "no end: every key");
        assert_eq!(prefix_end(b""), vec![0], "the empty prefix: every key");
    }
}
