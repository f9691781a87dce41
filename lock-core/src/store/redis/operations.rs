//! The lease operations: which commands each one sends, in which order,
//! and what its reply means. [`RedisStore`](super::RedisStore)'s docs
//! describe them for its users; [`calls`](super::calls) sends them.

use std::sync::Arc;
use std::time::Duration;

use ::redis::Cmd;

use super::calls::acked_count;
use super::config::ReplicaAcks;
use super::connect;
use super::keys::{KeyArg, lease_key, millis};
use super::scripts::{evalsha, sent};
use super::shared::Shared;
use crate::store::kit::{Deadline, check_key};
use crate::store::{AcquireRequest, Attempt, BoxFuture};
use crate::{Error, Holder, Result};

/// How long past the holder's expiry the "somebody waits" marker lives, so it
/// outlasts the waiters' naps (expiry plus at most a few tens of ms of jitter).
const WAITERS_MARGIN_MS: u64 = 250;

impl Shared {
    /// [`LockStore::acquire`](crate::LockStore::acquire): the plain
    /// `SET NX PX`, then, for a caller that waits and found the lease held,
    /// the acquire script; a fenced acquire goes straight to the script.
    pub(super) async fn acquire(self: &Arc<Self>, request: AcquireRequest<'_>) -> Result<Attempt> {
        check_key(request.key)?;
        // A failed or dropped acquire may still have set the lease on
        // the server; the runtime gives it back (see the store contract).
        // One deadline for the whole acquire, both requests of a
        // waiting one included.
        let deadline = connect::write_deadline(&self.config);
        if request.read || request.fenced {
            return self.acquire_scripted(request, deadline).await;
        }
        // A caller that waits tries the plain `SET NX PX` first too:
        // most acquires find the lock free, and then need neither the
        // script nor this process listening for the key's release. Only
        // a held lease costs the second round trip, which marks the key
        // as waited for, reads the holder's TTL, and retries the set in
        // the same step, so a release in between is never missed.
        match self.acquire_plain(request, deadline).await? {
            Attempt::Held { .. } if request.wake => self.acquire_scripted(request, deadline).await,
            attempt => Ok(attempt),
        }
    }

    /// [`LockStore::release`](crate::LockStore::release): the release
    /// script, which announces the release when somebody waits.
    pub(super) async fn release(&self, key: &str, token: &str) -> Result<bool> {
        let script = &self.scripts.release;
        let keys = sent::release(key);
        let released: i64 = self
            .on_lease("release", key, script, &keys, |call| {
                call.arg(token);
            })
            .await?;
        Ok(released == 1)
    }

    /// [`LockStore::extend`](crate::LockStore::extend): the extend script,
    /// followed by `WAIT` with [`replica_acks`](super::RedisConfig::replica_acks).
    pub(super) async fn extend(&self, key: &str, token: &str, ttl: Duration) -> Result<bool> {
        check_key(key)?;
        let script = &self.scripts.extend;
        let mut call = evalsha(script, &sent::extend(key));
        call.arg(token).arg(millis(ttl));
        let deadline = connect::write_deadline(&self.config);
        let (extended, acked): (i64, _) = self
            .invoke_write("extend", key, script, &call, deadline)
            .await?;
        self.replicated(extended == 1, acked)?;
        Ok(extended == 1)
    }

    /// [`LockStore::force_release`](crate::LockStore::force_release): the
    /// force-release script, which deletes the lease whoever holds it and
    /// announces the release as [`release`](Shared::release) does.
    pub(super) async fn force_release(&self, key: &str) -> Result<bool> {
        let script = &self.scripts.force_release;
        let keys = sent::force_release(key);
        let released: i64 = self
            .on_lease("force-release", key, script, &keys, |_| {})
            .await?;
        Ok(released == 1)
    }

    /// [`LockStore::holder`](crate::LockStore::holder): the writer, or
    /// else the reader whose lease ends first.
    pub(super) async fn holder(&self, key: &str) -> Result<Option<Holder>> {
        Ok(self.holders(key).await?.into_iter().next())
    }

    /// Every holder of the lease of `key`: its writer, or each live reader
    /// of its read side (the one whose lease ends first first), with the
    /// remaining TTL, in one script.
    pub(super) async fn holders(&self, key: &str) -> Result<Vec<Holder>> {
        let script = &self.scripts.holder;
        let keys = sent::holder(key);
        let found: Option<Found> = self
            .on_lease("read the holder of", key, script, &keys, |_| {})
            .await
            .map(|found: Option<Vec<::redis::Value>>| found.map(holders_of))?
            .transpose()
            .map_err(|e| Error::store("read the holder of", key, e))?;
        let Some((kind, holders, fence)) = found else {
            return Ok(Vec::new());
        };
        Ok(holders
            .into_iter()
            .map(|(token, remaining)| {
                let remaining = if remaining < 0 {
                    // No expiry: written by something other than this library.
                    Duration::MAX
                } else {
                    Duration::from_millis(remaining.unsigned_abs())
                };
                let holder = Holder::new(String::from_utf8_lossy(&token), remaining);
                match (kind, fence) {
                    (1, _) => holder.as_reader(),
                    (_, Some(fence)) => holder.with_fence(fence),
                    _ => holder,
                }
            })
            .collect())
    }

    /// An acquire that does not want a fencing token: the native
    /// `SET key token NX PX ttl`, the atomic set-if-absent, alone.
    ///
    /// It does not read the holder's remaining TTL or mark the key as waited
    /// for: a caller that waits follows a failed set with
    /// [`acquire_scripted`](Shared::acquire_scripted). A native command
    /// costs the server a fraction of a script call, which is what bounds
    /// throughput when many tasks share one Redis.
    async fn acquire_plain(
        &self,
        request: AcquireRequest<'_>,
        deadline: Deadline,
    ) -> Result<Attempt> {
        // Sized once, as `evalsha` does: a command grown argument by argument
        // reallocates its buffers several times, which cost more client CPU
        // than the rest of the call.
        let key = KeyArg::lease(request.key);
        let mut set = Cmd::with_capacity(6, 32 + key.len_hint() + request.token.len());
        set.arg("SET")
            .arg(key)
            .arg(request.token)
            .arg("NX")
            .arg("PX")
            .arg(millis(request.ttl));
        let mut connection = self.connection.clone();
        let reply: Option<::redis::Value> = match self.config.acks {
            None => deadline
                .bound(set.query_async(&mut connection))
                .await
                .map_err(|e| Error::store("acquire", request.key, e))?,
            Some(acks) => self.set_acked(request.key, set, acks, deadline).await?,
        };
        Ok(if reply.is_some() {
            Attempt::Acquired { fence: None }
        } else {
            Attempt::Held {
                remaining: None,
                wakeup: None,
            }
        })
    }

    /// `SET` followed by `WAIT` in one pipeline: the set's reply, once
    /// enough replicas acknowledged it (else [`Error::NotReplicated`], and the
    /// runtime gives the lease back, as for any acquire that fails).
    ///
    /// A boxed future of its own: inlined into the acquire's, it made that
    /// state machine nest deeply enough to overflow the compiler's query
    /// depth in applications that use every store.
    fn set_acked<'a>(
        &'a self,
        key: &'a str,
        set: Cmd,
        acks: ReplicaAcks,
        deadline: Deadline,
    ) -> BoxFuture<'a, Result<Option<::redis::Value>>> {
        Box::pin(async move {
            let (reply, acked): (Option<::redis::Value>, i64) = deadline
                .bound(self.acked_write(set, None, acks))
                .await
                .map_err(|e| Error::store("acquire", key, e))?;
            self.replicated(reply.is_some(), Some(acked_count(acked)))?;
            Ok(reply)
        })
    }

    /// An acquire that wants a fencing token, a reader's, or one that waits
    /// and found the key held: one script, so that marking the key as
    /// waited for (or taking the next fencing token, or joining the
    /// readers unless a writer holds the name or waits for it) happens
    /// atomically with the set-if-absent. Each script is sent every key
    /// it touches ([`sent`]); the writer's also takes the fencing flag.
    async fn acquire_scripted(
        self: &Arc<Self>,
        request: AcquireRequest<'_>,
        deadline: Deadline,
    ) -> Result<Attempt> {
        // Before the script: a release that lands between the script and our
        // sleep must still wake us.
        let interest = match request.wake {
            true => Some(
                self.waiters
                    .register_for(&lease_key(request.key)?, request.read),
            ),
            false => None,
        };
        let key = request.key;
        let (script, mut call) = if request.read {
            let script = &self.scripts.read_acquire;
            (script, evalsha(script, &sent::read_acquire(key)))
        } else {
            let script = &self.scripts.acquire;
            (script, evalsha(script, &sent::acquire(key)))
        };
        call.arg(request.token)
            .arg(millis(request.ttl))
            .arg(if request.wake { "1" } else { "0" })
            .arg(WAITERS_MARGIN_MS);
        if !request.read {
            call.arg(if request.fenced { "1" } else { "0" });
            call.arg(if request.announce { "1" } else { "0" });
        }
        let ((acquired, detail), acked): ((i64, i64), _) = self
            .invoke_write("acquire", request.key, script, &call, deadline)
            .await?;
        // Not acknowledged: the runtime gives back the lease of an acquire
        // that fails.
        self.replicated(acquired == 1, acked)?;
        if acquired != 1 {
            // 2: a writer with a claim on the readers' turn standing, which
            // it takes back if it stops waiting.
            let wakeup = interest.map(|interest| match acquired {
                2 => {
                    let (shared, key, token) =
                        (Arc::clone(self), key.to_owned(), request.token.to_owned());
                    interest.into_wakeup_withdrawing(async move {
                        shared.withdraw(&key, &token).await;
                    })
                }
                _ => interest.into_wakeup(),
            });
            return Ok(Attempt::Held {
                remaining: Some(Duration::from_millis(detail.max(0).unsigned_abs())),
                wakeup,
            });
        }
        // Readers waiting here pass the wake on (see `reader_admitted`).
        if request.read && !self.waiters.is_empty() {
            drop(interest);
            if let Ok(lease) = lease_key(key) {
                self.waiters.reader_admitted(&lease);
            }
        }
        Ok(Attempt::Acquired {
            fence: request.fenced.then_some(detail.max(0).unsigned_abs()),
        })
    }
}

impl Shared {
    /// Takes back the claim on the readers' turn of the writer waiting for
    /// `key` under `token`, which stopped waiting without the lease (see
    /// withdraw.lua). A claim that cannot be taken back now ends on its
    /// own, 2 s after the writer's last attempt.
    async fn withdraw(&self, key: &str, token: &str) {
        let script = &self.scripts.withdraw;
        let keys = sent::withdraw(key);
        let withdrawn: Result<i64> = self
            .on_lease("withdraw the claim of", key, script, &keys, |call| {
                call.arg(token);
            })
            .await;
        if let Err(error) = withdrawn {
            tracing::debug!(%error, "a waiting writer's claim is left to run out");
        }
    }
}

/// What the holder script found: its kind (1 for the readers of the read
/// side, 0 for a writer, 2 for a writer of a fenced name), each holder's
/// token and remaining ms, and the fenced name's last token.
pub(crate) type Found = (i64, Vec<(Vec<u8>, i64)>, Option<u64>);

/// The holder script's reply: `{kind, token, remaining ms, ...}`, or
/// `{2, token, remaining ms, fence}`.
pub(crate) fn holders_of(
    reply: Vec<::redis::Value>,
) -> std::result::Result<Found, ::redis::ParsingError> {
    let mut items = reply.into_iter();
    let kind: i64 = match items.next() {
        Some(kind) => ::redis::from_redis_value(kind)?,
        None => return Ok((0, Vec::new(), None)),
    };
    let mut holders = Vec::new();
    while let (Some(token), Some(remaining)) = (items.next(), items.next()) {
        holders.push((
            ::redis::from_redis_value(token)?,
            ::redis::from_redis_value(remaining)?,
        ));
        if kind == 2 {
            let fence: String = match items.next() {
                Some(fence) => ::redis::from_redis_value(fence)?,
                None => break,
            };
            // A counter that is not a count (written by something else)
            // is no fencing token: the holder is shown without one.
            return Ok((kind, holders, fence.parse().ok()));
        }
    }
    Ok((kind, holders, None))
}
