//! Leases on etcd: a consensus store, so a lease survives the loss of any
//! minority of members, and fencing tokens are the cluster's revisions.
//!
//! One job per file: [`config`] (the settings), [`connect`] (reaching the
//! cluster and reading its shortest lease), [`tls`] (`https://`
//! endpoints and their certificates), [`leases`] (each etcd lease
//! accounted for until a key is on it or it is given back), [`watch`] (the
//! one watch stream that wakes waiters); this file is the store and its
//! operations.

mod config;
mod connect;
pub(crate) mod keys;
mod leases;
mod listing;
mod read;
mod tls;
pub(crate) mod url;
mod watch;

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse,
};

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
/// # TLS
///
/// With the `etcd-tls` feature, `https://` endpoints connect over TLS:
/// [`EtcdConfig::tls`] names the CA that vouches for the members (without
/// one, the public CAs) and the client certificate a cluster started with
/// `--client-cert-auth` asks for; through [`connect`](crate::connect()) the
/// URL says the same with `?sslrootcert=PATH&sslcert=PATH&sslkey=PATH`
/// after the last member. A member whose certificate the CA did not sign,
/// or that wants a client certificate it was not given, fails the connect
/// with an [`Error::Store`] that says which. Endpoints that mix `http://`
/// and `https://` are refused, and so are `https://` endpoints in a build
/// without the feature.
///
/// # The operations
///
/// | operation | etcd requests |
/// |---|---|
/// | acquire | grant an etcd lease with the TTL, then one transaction: `put key token` on that lease if neither the key nor any reader's key exists (`create_revision == 0` on the key and on the readers' range), else read the holder; a waiting caller then reads the holder's lease TTL |
/// | a reader's acquire | the same, putting the reader's own key if the key and every waiting writer's claim are absent |
/// | release | one transaction: delete the key if its value is our token, else delete our reader's key; then revoke its lease |
/// | extend | grant a lease with the new TTL, then one transaction: `put key token` on it if the value is still our token (a reader: a second transaction, on its own key); then revoke the old lease |
/// | holder | one ranged read of the key and its readers, then the lease's remaining TTL (a reader's: the one that ends first), in whole seconds rounded up; a lease a renewal revoked meanwhile sends the read back to the key, now on its new lease |
/// | a guard's check ([`is_still_held`](crate::LockGuard::is_still_held)) | one transaction: the key's value compared with the token, else the token's own reader key counted |
/// | list | a ranged read of the prefix, in pages of 1,000 pinned to one revision (a consistent snapshot), then each lease's remaining TTL: one entry per writer and per reader |
/// | force-release | one ranged delete of the key, its readers and its claims; then revoke their leases |
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
/// # Readers
///
/// [`read_mode`](LockStore::read_mode) is true. Each reader
/// ([`Lock::read`](crate::Lock::read)) is a key of its own beside the
/// name's, on an etcd lease of its own, so it expires alone, and its
/// release and extend touch nothing else. A writer that waits while
/// readers hold the name claims it: a key on a short lease that holds new
/// readers off, so overlapping readers cannot starve it. Its claim's lease
/// is kept alive while it waits (if that fails, it is woken to claim
/// again); the claim goes when it takes the name or stops waiting
/// (cancelled included), and runs out within two seconds (or etcd's
/// shortest lease) if its process dies. It waits for the last
/// reader's release by the watch, as any waiter does: a reader leaving
/// others in wakes nobody. A writer waiting behind another writer makes no
/// claim: when that writer releases, new readers in other processes may go
/// first. Names containing a NUL byte are refused with
/// [`Error::InvalidName`] by every operation, since a name's readers are
/// kept under the name followed by one. The transactions compare key
/// ranges, which etcd has done since 3.3: connected to an older server
/// (its version read when the store connects), the store keeps no readers
/// and refuses one with [`Error::ReadUnsupported`]. Every process using a
/// name's read side must run a version that has it: an earlier version's
/// writer does not see readers.
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
    /// Whether the cluster compares key ranges in transactions (etcd 3.3
    /// and later), which its readers need.
    ranges: bool,
    endpoints: Vec<String>,
    /// How it opens itself again ([`LockStore::reopen`]).
    reopen: Option<kit::Reopen>,
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

    /// How long a waiting writer's claim lasts, in seconds: at least
    /// [`read::CLAIM_SECONDS`], and no shorter than the cluster grants.
    fn claim_seconds(&self) -> i64 {
        let shortest = self.seconds(self.shared.min_ttl.max(Duration::from_secs(1)));
        shortest.max(read::CLAIM_SECONDS)
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
            keys::check_name(request.key)?;
            // Before the attempt, so the watch this waiter asks for below is
            // kept while it waits.
            let interest = request
                .wake
                .then(|| self.shared.waiters.register_for(request.key, request.read));
            let seconds = self.seconds(request.ttl);
            let (key, token, wake) = (request.key, request.token, request.wake);
            // Given back if this future is dropped before a key is known to
            // be on it, or if the attempt loses.
            let mut lease = Granted::new(&self.shared.client, seconds, self.shared.config.timeout);
            let mut client = self.shared.client.clone();
            let attempt = async {
                lease.grant().await?;
                let txn = if request.read {
                    read::reader_put(key, token, lease.id())
                } else {
                    read::writer_put(key, token, lease.id(), wake)
                };
                let answer = client.txn(txn).await?;
                let revision = answer.header().map_or(0, |header| header.revision());
                Ok::<_, BoxError>((
                    answer.succeeded(),
                    revision,
                    found(answer.op_responses().as_slice()),
                ))
            };
            // One deadline for the whole attempt, the holder's TTL and a
            // writer's claim included.
            let deadline = self.deadline();
            let failed = |e: CallError<BoxError>| Error::store("acquire", key, e.into_boxed());
            let (won, revision, holder) = deadline.bound(attempt).await.map_err(failed)?;
            if won {
                lease.keep();
                if request.read {
                    // Readers waiting here pass the wake on (see
                    // `reader_admitted`).
                    drop(interest);
                    self.shared.waiters.reader_admitted(key);
                }
                return Ok(Attempt::Acquired {
                    fence: request.fenced.then_some(revision.max(0).unsigned_abs()),
                });
            }
            // Nobody's: back now, not after the holder's TTL is read.
            drop(lease);
            let Some(interest) = interest else {
                return Ok(Attempt::Held {
                    remaining: None,
                    wakeup: None,
                });
            };
            let remaining = match &holder {
                Some(holder) if holder.lease != 0 => {
                    let mut client = self.shared.client.clone();
                    let ttl = async {
                        Ok::<_, BoxError>(
                            client.lease_time_to_live(holder.lease, None).await?.ttl(),
                        )
                    };
                    let ttl = deadline.bound(ttl).await.map_err(failed)?;
                    // The TTL's seconds are truncated: add one so a nap
                    // covers it (the watch wakes the waiter at the delete
                    // anyway).
                    Some(Duration::from_secs(ttl.max(0).unsigned_abs() + 1))
                }
                _ => None,
            };
            // A writer held off by readers claims the name, so that no new
            // reader gets in meanwhile (see `read`).
            let held_by_readers = holder.is_some_and(|holder| {
                std::str::from_utf8(&holder.key)
                    .is_ok_and(|held| matches!(keys::parse(held), keys::Stored::Reader(_)))
            });
            let claim = if !request.read && held_by_readers {
                let seconds = self.claim_seconds();
                let claim = read::Claim::put(
                    &self.shared.client,
                    &self.shared.waiters,
                    key,
                    token,
                    seconds,
                    self.shared.config.timeout,
                );
                Some(deadline.bound(claim).await.map_err(failed)?)
            } else {
                None
            };
            // Watch from just after the revision it was found held at: its
            // delete cannot slip between this attempt and the watch.
            self.shared.watches.watch(key, revision + 1);
            Ok(Attempt::Held {
                remaining,
                wakeup: Some({
                    let pass_on = interest.pass_on();
                    Wakeup::new(read::Waiting::new(interest, claim), pass_on)
                }),
            })
        })
    }

    fn release<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            keys::check_name(key)?;
            let (key_owned, token_owned) = (key.to_owned(), token.to_owned());
            let (released, lease, free) = self
                .call("release", key, |mut client| async move {
                    // The writer's key if it is ours, else our reader's key,
                    // then how many readers are left.
                    let reader = keys::reader(&key_owned, &token_owned);
                    let (readers, readers_end) = keys::readers(&key_owned);
                    let txn = Txn::new()
                        .when([Compare::value(
                            key_owned.clone(),
                            CompareOp::Equal,
                            token_owned,
                        )])
                        .and_then([
                            TxnOp::get(key_owned.clone(), None),
                            TxnOp::delete(key_owned, None),
                        ])
                        .or_else([
                            TxnOp::delete(reader, Some(DeleteOptions::new().with_prev_key())),
                            TxnOp::get(
                                readers,
                                Some(
                                    GetOptions::new()
                                        .with_range(readers_end)
                                        .with_count_only(),
                                ),
                            ),
                        ]);
                    let answer = client.txn(txn).await?;
                    let responses = answer.op_responses();
                    if answer.succeeded() {
                        let lease = found(responses.as_slice()).map_or(0, |kv| kv.lease);
                        return Ok::<_, BoxError>((true, lease, true));
                    }
                    let free = matches!(responses.get(1), Some(TxnOpResponse::Get(left)) if left.count() == 0);
                    Ok(match responses.first() {
                        Some(TxnOpResponse::Delete(deleted)) => (
                            deleted.deleted() > 0,
                            deleted.prev_kvs().first().map_or(0, |kv| kv.lease()),
                            free,
                        ),
                        _ => (false, 0, false),
                    })
                })
                .await?;
            if released {
                self.revoke_later(lease);
                // Waiters here are woken only when the name is free: a
                // reader leaving others in frees nothing for them.
                if free {
                    self.shared.waiters.released(key);
                }
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
            keys::check_name(key)?;
            let seconds = self.seconds(ttl);
            let mut client = self.shared.client.clone();
            let extending = async {
                // The writer's key, until it turns out to be a reader's
                // lease: then that reader's key.
                let mut target = Cow::Borrowed(key);
                let mut spare = None;
                let mut tries = 0;
                while tries < EXTEND_TRIES {
                    // Given back if this future is dropped before the key is
                    // known to be on it, or if the key is not ours.
                    let (mut lease, granted_at) = match spare.take() {
                        Some(spare) => spare,
                        None => {
                            let mut lease = Granted::new(
                                &self.shared.client,
                                seconds,
                                self.shared.config.timeout,
                            );
                            let granted_at = lease.grant().await?;
                            (lease, granted_at)
                        }
                    };
                    let reader = keys::reader(key, token);
                    let mut otherwise = vec![TxnOp::get(&*target, None)];
                    if matches!(target, Cow::Borrowed(_)) {
                        otherwise.push(TxnOp::get(reader.as_str(), None));
                    }
                    // Only onto a key untouched since the grant: a copy of
                    // this transaction delayed in the cluster must never land
                    // after a later write (the background settling of a
                    // cut-off extend, another extend of this lock), or it
                    // would move the key back onto a lease that later write
                    // then revokes, deleting a key that is still held.
                    let txn = Txn::new()
                        .when([
                            Compare::value(&*target, CompareOp::Equal, token),
                            Compare::mod_revision(&*target, CompareOp::Less, granted_at + 1),
                        ])
                        .and_then([
                            TxnOp::get(&*target, None),
                            TxnOp::put(
                                &*target,
                                token,
                                Some(PutOptions::new().with_lease(lease.id())),
                            ),
                        ])
                        .or_else(otherwise);
                    // From here until its answer is read, the key may be on
                    // either lease: a cut-off extend is settled in the
                    // background.
                    let sent = ExtendSent::new(&mut lease, &target, token, granted_at);
                    let answer = client.txn(txn).await?;
                    sent.answered();
                    let responses = answer.op_responses();
                    if answer.succeeded() {
                        let old = found(&responses).map_or(0, |kv| kv.lease);
                        return Ok::<_, BoxError>((Some(lease), old));
                    }
                    let ours = |at: usize| {
                        responses
                            .get(at)
                            .and_then(|response| found(std::slice::from_ref(response)))
                            .is_some_and(|kv| kv.value == token.as_bytes())
                    };
                    if ours(0) {
                        // Still ours, but written since the grant: try again
                        // on a fresh lease (this one is given back as it
                        // drops).
                        tries += 1;
                    } else if matches!(target, Cow::Borrowed(_)) && ours(1) {
                        // A reader's lease: extend its key instead, on the
                        // lease just granted, which nothing is on yet.
                        target = Cow::Owned(reader);
                        spare = Some((lease, granted_at));
                    } else {
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
            keys::check_name(key)?;
            let key_owned = key.to_owned();
            // The name's writer, its readers and the claims of writers
            // waiting for them: every key of the name, in one delete.
            let options = DeleteOptions::new()
                .with_range(keys::companions_end(key))
                .with_prev_key();
            let (released, leases) = self
                .call("force-release", key, |mut client| async move {
                    let answer = client.delete(key_owned, Some(options)).await?;
                    let mut released = false;
                    let mut leases = Vec::new();
                    for kv in answer.prev_kvs() {
                        let held = kv.key_str().is_ok_and(|stored| {
                            !matches!(keys::parse(stored), keys::Stored::Claim(_))
                        });
                        released |= held;
                        leases.push(kv.lease());
                    }
                    Ok::<_, BoxError>((released, leases))
                })
                .await?;
            for lease in leases {
                self.revoke_later(lease);
            }
            if released {
                self.shared.waiters.wake_key(key);
            }
            Ok(released)
        })
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        Box::pin(self.holder_of_name(key))
    }

    fn is_held_by<'a>(&'a self, key: &'a str, token: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(self.held_by(key, token))
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        Box::pin(self.list_under(prefix))
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

    /// Readers are keys of their own beside the name's (see `read`), on
    /// etcd 3.3 and later.
    fn read_mode(&self) -> bool {
        self.shared.ranges
    }

    /// On the watch stream, which hears every new holder and every delete
    /// of the key.
    fn observe(&self, key: &str) -> Option<Wakeup> {
        let observer = Wakeup::observer(self.shared.waiters.observe(key));
        self.shared.watches.watch(key, watch::FROM_NOW);
        Some(observer)
    }

    fn reopen(&self) -> Option<BoxFuture<'static, Result<Arc<dyn LockStore>>>> {
        self.shared.reopen.as_ref().map(kit::Reopen::open)
    }
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
