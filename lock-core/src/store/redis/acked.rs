//! Connections of their own for the lease writes that wait for replicas.
//!
//! `WAIT` blocks the connection it is sent on until the replicas answer or
//! its timeout passes, and every command queued behind it on that
//! connection waits too. The store's command connection is shared by every
//! call of every task, so a `WAIT` there would hold up other tasks'
//! releases, reads and renewals, and queue other acquires' writes behind
//! it, past their deadlines:
//!
//! ```text
//! shared: SET a, WAIT (1 s) | GET b ......... waits 1 s | SET c ... late
//! own:    SET a, WAIT (1 s)
//! shared: GET b (at once) | SET c (at once)
//! ```
//!
//! So each write that waits for replicas (with
//! [`replica_acks`](super::RedisConfig::replica_acks)) takes a connection
//! of its own from a small pool, for the write and its `WAIT`, and gives it
//! back only when both were answered: a connection cut off mid-call may
//! still be blocked in its `WAIT`, and is dropped instead. Writes stay in
//! order with the give-back of their lease all the same: the write is sent
//! at once on its own connection and runs before its `WAIT`, and the
//! runtime's give-back of an acquire that failed looks again for a lease
//! that arrives late.

use std::sync::{Mutex, PoisonError};

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::cluster::ClusterClient;
use ::redis::cluster_async::ClusterConnection;
use ::redis::{AsyncConnectionConfig, Client, Cmd, Pipeline, RedisFuture, RedisResult, Value};

use super::sentinel::SentinelConnection;

/// How many idle connections the pool keeps; more are opened while more
/// writes wait at once, and closed when they are done.
const MAX_IDLE: usize = 64;

/// Where new connections come from.
pub(super) enum Opener {
    /// One server.
    Single(Client, AsyncConnectionConfig),
    /// A cluster: each connection follows the slot map on its own, so a
    /// `WAIT` pipelined after a keyed write reaches the key's primary.
    Cluster(ClusterClient),
    /// The primary the sentinels name when the connection is opened.
    Sentinel(SentinelConnection, AsyncConnectionConfig),
}

/// A connection used by one write at a time.
pub(super) enum Own {
    Multiplexed(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Own {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Own::Multiplexed(connection) => connection.req_packed_command(cmd),
            Own::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Own::Multiplexed(connection) => connection.req_packed_commands(cmd, offset, count),
            Own::Cluster(connection) => connection.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Own::Multiplexed(connection) => connection.get_db(),
            Own::Cluster(connection) => connection.get_db(),
        }
    }
}

/// The pool. See the [module docs](self).
pub(super) struct AckedPool {
    opener: Opener,
    /// Idle connections, each with the primary generation it was opened
    /// for (behind Sentinel; 0 otherwise).
    idle: Mutex<Vec<(Own, u64)>>,
}

impl AckedPool {
    pub(super) fn new(opener: Opener) -> Self {
        AckedPool {
            opener,
            idle: Mutex::new(Vec::new()),
        }
    }

    /// Which primary new connections reach: behind Sentinel, a connection
    /// opened for an earlier one is stale after a failover.
    fn generation(&self) -> u64 {
        match &self.opener {
            Opener::Sentinel(sentinel, _) => sentinel.generation(),
            _ => 0,
        }
    }

    /// A connection for one write: an idle one for the current primary, or
    /// a new one. Give it back with [`Checked::done`] once the write and
    /// its `WAIT` were answered; dropped otherwise.
    pub(super) async fn checkout(&self) -> RedisResult<Checked<'_>> {
        let generation = self.generation();
        let reused = {
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            // Connections to an earlier primary are closed on the way.
            idle.retain(|(_, opened)| *opened == generation);
            idle.pop()
        };
        let connection = match reused {
            Some((connection, _)) => connection,
            None => self.open().await?,
        };
        Ok(Checked {
            pool: self,
            connection,
            generation,
        })
    }

    async fn open(&self) -> RedisResult<Own> {
        Ok(match &self.opener {
            Opener::Single(client, config) => Own::Multiplexed(
                client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?,
            ),
            Opener::Cluster(client) => Own::Cluster(client.get_async_connection().await?),
            Opener::Sentinel(sentinel, config) => Own::Multiplexed(
                sentinel
                    .primary_client()
                    .await?
                    .get_multiplexed_async_connection_with_config(config)
                    .await?,
            ),
        })
    }
}

/// A connection checked out of the pool for one write.
pub(super) struct Checked<'a> {
    pool: &'a AckedPool,
    connection: Own,
    generation: u64,
}

impl Checked<'_> {
    /// The connection, for the write and its `WAIT`.
    pub(super) fn connection(&mut self) -> &mut Own {
        &mut self.connection
    }

    /// The write and its `WAIT` were answered: the connection is idle
    /// again, and goes back to the pool (unless it is full).
    pub(super) fn done(self) {
        let mut idle = self
            .pool
            .idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if idle.len() < MAX_IDLE {
            idle.push((self.connection, self.generation));
        }
    }
}
