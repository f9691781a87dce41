//! Listing the leases under a prefix, for operators: `SCAN` with `MATCH` in
//! bounded batches (never `KEYS`, which blocks the server for everyone), on
//! every primary of a cluster, then each lease's holder read with the same
//! script [`holder`](crate::LockStore::holder) uses.
//!
//! A `SCAN` is not a snapshot: a lease taken during the walk may be missed,
//! and one released during it is dropped when its holder read finds nothing.
//! Redis guarantees that a key present for the whole walk is returned.

use std::collections::BTreeSet;

use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};
use ::redis::{Cmd, RedisError, Value, from_redis_value_ref};
use futures_util::future::join_all;

use super::connect;
use super::keys::{lease_pattern, store_key_of};
use super::shared::{Connection, Shared};
use crate::{Error, Holder, Result};

/// How many keys each `SCAN` call looks at (its `COUNT`): the work the
/// server does per call, so other clients' commands are never held up long.
const SCAN_COUNT: usize = 1000;

/// How many holder reads are in flight at once.
const READS_AT_ONCE: usize = 128;

const OPERATION: &str = "list the locks under";

impl Shared {
    /// Every live lease whose store key starts with `prefix`, with its holder.
    pub(super) async fn list_leases(&self, prefix: &str) -> Result<Vec<(String, Holder)>> {
        let pattern = lease_pattern(prefix);
        let mut lease_keys = BTreeSet::new();
        match &self.connection {
            Connection::Single(_) | Connection::Sentinel(_) => {
                self.scan_node(None, 0, &pattern, prefix, &mut lease_keys)
                    .await?;
            }
            Connection::Cluster(cluster) => {
                self.scan_cluster(cluster, &pattern, prefix, &mut lease_keys)
                    .await?;
            }
        }
        let store_keys: Vec<String> = lease_keys
            .iter()
            .filter_map(|lease| store_key_of(lease))
            .collect();
        let mut held = Vec::with_capacity(store_keys.len());
        for batch in store_keys.chunks(READS_AT_ONCE) {
            let holders = join_all(batch.iter().map(|key| self.holders(key))).await;
            for (key, holders) in batch.iter().zip(holders) {
                // None: released (or expired) since the scan saw it. Several:
                // the readers of its read side.
                for holder in holders? {
                    held.push((key.clone(), holder));
                }
            }
        }
        Ok(held)
    }

    /// Walks one node's keyspace from `cursor` until the walk ends: the
    /// single server (`node` None, from cursor 0), or the rest of the walk
    /// of the cluster primary at `node`.
    async fn scan_node(
        &self,
        node: Option<(&str, u16)>,
        mut cursor: u64,
        pattern: &str,
        prefix: &str,
        found: &mut BTreeSet<String>,
    ) -> Result<()> {
        loop {
            let scan = scan(cursor, pattern);
            let reply = match (node, &self.connection) {
                (Some((host, port)), Connection::Cluster(cluster)) => {
                    let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.to_owned(),
                        port,
                    });
                    let mut cluster = cluster.clone();
                    self.bounded(prefix, cluster.route_command(scan, routing))
                        .await?
                }
                _ => {
                    let mut connection = self.connection.clone();
                    self.bounded(prefix, scan.query_async::<Value>(&mut connection))
                        .await?
                }
            };
            let (next, keys) = scan_reply(&reply, prefix)?;
            found.extend(keys);
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }

    /// Walks every primary of the cluster. The first batch goes to all
    /// primaries at once, which is also how they are found; each then
    /// continues on its own cursor. A key seen on two nodes (a slot moving
    /// during the walk) is listed once.
    async fn scan_cluster(
        &self,
        cluster: &ClusterConnection,
        pattern: &str,
        prefix: &str,
        found: &mut BTreeSet<String>,
    ) -> Result<()> {
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let mut cluster = cluster.clone();
        let first = self
            .bounded(prefix, cluster.route_command(scan(0, pattern), routing))
            .await?;
        let Value::Map(per_node) = &first else {
            return Err(unexpected(prefix, &first));
        };
        for (address, reply) in per_node {
            let (next, keys) = scan_reply(reply, prefix)?;
            found.extend(keys);
            if next == 0 {
                continue;
            }
            let address: String =
                from_redis_value_ref(address).map_err(|_| unexpected(prefix, &first))?;
            let node = address
                .rsplit_once(':')
                .and_then(|(host, port)| Some((host, port.parse::<u16>().ok()?)))
                .ok_or_else(|| unexpected(prefix, &first))?;
            self.scan_node(Some(node), next, pattern, prefix, found)
                .await?;
        }
        Ok(())
    }

    /// One call under the store's deadline.
    async fn bounded(
        &self,
        prefix: &str,
        call: impl Future<Output = std::result::Result<Value, RedisError>>,
    ) -> Result<Value> {
        connect::deadline(&self.config)
            .bound(call)
            .await
            .map_err(|e| Error::store(OPERATION, prefix, e))
    }
}

/// `SCAN cursor MATCH pattern COUNT n`.
fn scan(cursor: u64, pattern: &str) -> Cmd {
    let mut scan = ::redis::cmd("SCAN");
    scan.arg(cursor)
        .arg("MATCH")
        .arg(pattern)
        .arg("COUNT")
        .arg(SCAN_COUNT);
    scan
}

/// A `SCAN` reply: the next cursor and the keys of this batch (keys that are
/// not UTF-8 are not leases this library wrote, and are skipped).
fn scan_reply(reply: &Value, prefix: &str) -> Result<(u64, Vec<String>)> {
    let (cursor, keys): (u64, Vec<Vec<u8>>) = from_redis_value_ref(reply).map_err(|_| {
        Error::store(
            OPERATION,
            prefix,
            format!("unexpected SCAN reply {reply:?}"),
        )
    })?;
    let keys = keys
        .into_iter()
        .filter_map(|key| String::from_utf8(key).ok())
        .collect();
    Ok((cursor, keys))
}

fn unexpected(prefix: &str, reply: &Value) -> Error {
    Error::store(
        OPERATION,
        prefix,
        format!("unexpected SCAN reply from the cluster's primaries: {reply:?}"),
    )
}
