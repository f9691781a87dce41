//! [`Shared`]: what the clones of one store share, the command connection
//! first. Built by [`connect`](super::connect); every operation runs on it.

use std::sync::Arc;

use ::redis::aio::{ConnectionLike, ConnectionManager};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{Cmd, Pipeline, RedisFuture, Value};

use super::acked::AckedPool;
use super::config::RedisConfig;
use super::scripts::Scripts;
use super::sentinel::SentinelConnection;
use crate::store::kit::{Background, Reopen, Waiters};

/// What the clones of one store share.
pub(super) struct Shared {
    pub(super) connection: Connection,
    /// Connections of their own for lease writes that wait for replicas
    /// (with [`RedisConfig::replica_acks`] only).
    pub(super) acked: Option<AckedPool>,
    pub(super) scripts: Scripts,
    pub(super) waiters: Arc<Waiters>,
    pub(super) config: RedisConfig,
    /// `host:port` of each node given, for `Debug`. Never a password.
    pub(super) nodes: Vec<String>,
    /// The release listener: kept only to be dropped, which stops it when
    /// the last clone goes.
    pub(super) _listener: Background,
    /// How releases are announced: `PUBLISH`, or `SPUBLISH` on a cluster
    /// that has sharded pub/sub.
    pub(super) publish: &'static str,
    /// How the store opens itself again, from what it was opened from
    /// ([`LockStore::reopen`](crate::LockStore::reopen)); `None` on a store
    /// opened that way.
    pub(super) reopen: Option<Reopen>,
}

/// The command connection: one reconnecting multiplexed connection to a
/// single server, the cluster client's connection (which follows
/// `MOVED`/`ASK` and refreshes its slot map), or one to the primary the
/// sentinels name (found again after a failover). Commands on one
/// connection reach the server in the order they were sent, which is what
/// keeps a give-back from overtaking the acquire it undoes.
#[derive(Clone)]
pub(super) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConnection),
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
            Connection::Sentinel(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => connection.req_packed_commands(cmd, offset, count),
            Connection::Cluster(connection) => connection.req_packed_commands(cmd, offset, count),
            Connection::Sentinel(connection) => connection.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
            Connection::Sentinel(connection) => connection.get_db(),
        }
    }
}
