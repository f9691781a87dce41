//! Reading who holds what: the holder of one name, whether a token still
//! holds it, and every lease under a prefix. The holder and the listing
//! are one ranged read (a consistent snapshot), then each lease's
//! remaining TTL; the check is one transaction on the name's key and the
//! token's own reader key.
//!
//! # A holder that renews is read as live
//!
//! Each renewal moves a key onto a new etcd lease and then revokes the old
//! one, so the lease a read found on a key may be gone by the time its TTL
//! is read, though its holder lives on:
//!
//! ```text
//! holder   extend: put key on lease 2 ── revoke lease 1
//! reader   get key (lease 1) ─────────────────────────── TTL of lease 1: not found
//! ```
//!
//! A lease found gone is therefore never taken as "nobody holds it": the
//! key is read again, and is either gone too (released, or run out: etcd
//! deletes a lease's keys as it revokes it), or on a newer lease, whose TTL
//! is read in turn.

use std::borrow::Cow;
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};

use super::EtcdStore;
use super::keys::{self, Stored};
use crate::store::kit::BoxError;
use crate::{Holder, Result};

/// How many leases' TTLs are read at once.
const BATCH: usize = 128;

/// A key found held: its name, its token, its etcd lease, and (for a
/// writer) the revision it was created at, its fencing token.
#[derive(Clone)]
struct Found {
    /// The key as stored, to read it again.
    key: Vec<u8>,
    name: String,
    token: String,
    lease: i64,
    reader: bool,
    revision: i64,
}

impl EtcdStore {
    /// The holder of `key`: its writer, or else the reader whose lease
    /// ends first. One read of the writer's key and the readers' range.
    pub(super) async fn holder_of_name(&self, key: &str) -> Result<Option<Holder>> {
        const OPERATION: &str = "read the holder of";
        keys::check_name(key)?;
        let (from, end) = (key.to_owned(), keys::readers_end(key));
        let answer = self
            .call(OPERATION, key, |mut client| async move {
                let options = GetOptions::new().with_range(end);
                Ok::<_, BoxError>(client.get(from, Some(options)).await?)
            })
            .await?;
        let found: Vec<Found> = answer.kvs().iter().filter_map(found).collect();
        // The writer's key sorts first.
        if let Some(writer) = found.iter().find(|found| !found.reader) {
            let writer = std::slice::from_ref(writer);
            return Ok(self.holders(OPERATION, key, writer).await?.pop().map(|(_, h)| h));
        }
        let readers = self.holders(OPERATION, key, &found).await?;
        Ok(readers
            .into_iter()
            .map(|(_, holder)| holder)
            .min_by_key(Holder::remaining_ttl))
    }

    /// Whether `token` holds `key`, as its writer or as one of its readers:
    /// one transaction reading the name's key and the token's own reader
    /// key, and no other name's. A key is there exactly while its lease
    /// lives (etcd deletes a lease's keys as it revokes it), so no TTL is
    /// read.
    pub(super) async fn held_by(&self, key: &str, token: &str) -> Result<bool> {
        keys::check_name(key)?;
        let txn = Txn::new()
            .when([Compare::value(key, CompareOp::Equal, token)])
            .or_else([TxnOp::get(
                keys::reader(key, token),
                Some(GetOptions::new().with_count_only()),
            )]);
        self.call("check the holder of", key, |mut client| async move {
            let answer = client.txn(txn).await?;
            let reader = matches!(
                answer.op_responses().first(),
                Some(TxnOpResponse::Get(found)) if found.count() > 0
            );
            Ok::<_, BoxError>(answer.succeeded() || reader)
        })
        .await
    }

    /// One ranged read of the keys under `prefix`, in pages pinned to the
    /// first page's revision (one consistent snapshot), then each lease's
    /// remaining TTL: an entry per writer and per reader.
    pub(super) async fn list_under(&self, prefix: &str) -> Result<Vec<(String, Holder)>> {
        const OPERATION: &str = "list the locks under";
        const PAGE: i64 = 1000;
        let end = prefix_end(prefix.as_bytes());
        let mut start = if prefix.is_empty() {
            vec![0]
        } else {
            prefix.as_bytes().to_vec()
        };
        let mut revision = 0;
        let mut held = Vec::new();
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
            held.extend(answer.kvs().iter().filter_map(found));
            match answer.kvs().last() {
                Some(last) if answer.more() => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => break,
            }
        }
        self.holders(OPERATION, prefix, &held).await
    }

    /// Each of `found` with its lease's remaining TTL, read `BATCH` at a
    /// time; those whose key is gone meanwhile are left out, and one that
    /// moved onto a newer lease (renewed) is read again.
    async fn holders(
        &self,
        operation: &'static str,
        key: &str,
        found: &[Found],
    ) -> Result<Vec<(String, Holder)>> {
        let mut held = Vec::with_capacity(found.len());
        for batch in found.chunks(BATCH) {
            let reads = batch.iter().map(|found| {
                self.call(operation, key, move |mut client| async move {
                    holder_of(&mut client, found).await
                })
            });
            let holders = futures_util::future::join_all(reads).await;
            for (found, holder) in batch.iter().zip(holders) {
                if let Some(holder) = holder? {
                    held.push((found.name.clone(), holder));
                }
            }
        }
        Ok(held)
    }
}

/// What a stored key holds: `None` for a waiting writer's claim, and for a
/// key or value that is not text.
fn found(kv: &etcd_client::KeyValue) -> Option<Found> {
    let (Ok(stored), Ok(token)) = (kv.key_str(), kv.value_str()) else {
        return None;
    };
    let (name, reader) = match keys::parse(stored) {
        Stored::Writer(name) => (name, false),
        Stored::Reader(name) => (name, true),
        Stored::Claim(_) => return None,
    };
    Some(Found {
        key: kv.key().to_vec(),
        name: name.to_owned(),
        token: token.to_owned(),
        lease: kv.lease(),
        reader,
        revision: kv.create_revision(),
    })
}

/// The holder `found` describes, with its lease's remaining TTL read now,
/// or `None` when its key is gone since it was read. A lease found gone
/// sends the read back to the key, which a renewal may have moved onto a
/// newer lease (see the [module docs](self)): each round needs the holder
/// to have renewed again meanwhile, and the caller's deadline bounds them
/// all.
async fn holder_of(client: &mut Client, found: &Found) -> std::result::Result<Option<Holder>, BoxError> {
    let mut found = Cow::Borrowed(found);
    loop {
        if found.lease == 0 {
            // No lease: written by something other than this library.
            return Ok(Some(found.holder(Duration::MAX)));
        }
        let ttl = client.lease_time_to_live(found.lease, None).await?.ttl();
        if ttl >= 0 {
            // etcd says whole seconds, rounded down: the lease may last up
            // to a second more. Said as the longest it may last, as an
            // acquire that finds it held says it, so that whoever waits
            // for its end (an observer) does not come back while it lasts.
            return Ok(Some(found.holder(Duration::from_secs(ttl.unsigned_abs() + 1))));
        }
        let again = client.get(found.key.clone(), None).await?;
        match again.kvs().first().and_then(self::found) {
            // Moved onto a newer lease (renewed), or released and taken
            // again: whoever holds it now.
            Some(now) if now.lease != found.lease => found = Cow::Owned(now),
            // Gone with its lease, or still on it while etcd deletes it:
            // its lease ran out.
            _ => return Ok(None),
        }
    }
}

impl Found {
    /// The holder this describes, with `remaining` of its lease. A
    /// writer's fencing token is the revision its key was created at.
    fn holder(&self, remaining: Duration) -> Holder {
        let holder = Holder::new(self.token.clone(), remaining);
        if self.reader {
            return holder.as_reader();
        }
        match u64::try_from(self.revision) {
            Ok(fence) if fence > 0 => holder.with_fence(fence),
            _ => holder,
        }
    }
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
