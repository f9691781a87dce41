//! [`RedisConfig`]: how a [`RedisStore`](super::RedisStore) behaves.

use std::time::Duration;

use crate::store::kit::Tls;

/// The store's name in [`Error::InvalidConfig`](crate::Error::InvalidConfig),
/// as [`LockStore::name`](crate::LockStore::name) gives it.
pub(super) const STORE: &str = "redis";

/// The default pub/sub channel releases are announced on.
const DEFAULT_CHANNEL: &str = "lock-core:released";

/// The default bound on every call.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// How a [`RedisStore`](super::RedisStore) behaves: its time bound and its release channels.
///
/// ```
/// use std::time::Duration;
/// use lock_core::RedisConfig;
///
/// let config = RedisConfig::new()
///     .timeout(Duration::from_secs(1))
///     .channel("billing:lock-released");
/// # let _ = config;
/// ```
#[derive(Clone, Debug)]
#[must_use = "a RedisConfig does nothing until passed to a RedisStore constructor"]
pub struct RedisConfig {
    pub(super) timeout: Duration,
    pub(super) channel: String,
    /// `replica_acks`: how many replicas must acknowledge each lease
    /// write, and how long to wait for them.
    pub(super) acks: Option<ReplicaAcks>,
    /// The CA and client certificate for `rediss://`.
    pub(super) tls: Tls,
}

/// How many replicas must acknowledge a lease write, within how long.
#[derive(Clone, Copy, Debug)]
pub(super) struct ReplicaAcks {
    pub(super) replicas: u32,
    pub(super) timeout: Duration,
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            timeout: DEFAULT_TIMEOUT,
            channel: DEFAULT_CHANNEL.to_owned(),
            acks: None,
            tls: Tls::new(),
        }
    }
}

impl RedisConfig {
    /// The defaults: a 3 s timeout and the channel suffix `lock-core:released`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The CA and client certificate for a `rediss://` server (with the
    /// `redis-tls` feature), in place of the public CAs and no client
    /// certificate. The URL's `sslrootcert`, `sslcert` and `sslkey` win
    /// over it. For one server: Redis Cluster and Sentinel URLs, and the
    /// stores over a client of the application's own (`from_client`...),
    /// refuse it rather than leave it unused (build those clients with the
    /// redis crate's `TlsCertificates`). The files are read when the store
    /// connects: after renewing a client certificate, connect a new store.
    pub fn tls(self, tls: Tls) -> Self {
        RedisConfig { tls, ..self }
    }

    /// The longest any one call (connect, acquire, release, extend...) may
    /// take before it fails with [`Error::Store`](crate::Error::Store). Default 3 s.
    ///
    /// This is what bounds a call while Redis is down or unreachable. Too short
    /// a bound turns a slow but healthy server into errors; too long a bound
    /// stalls callers during an outage. A zero timeout is raised to 1 ms.
    pub fn timeout(self, timeout: Duration) -> Self {
        RedisConfig {
            timeout: timeout.max(Duration::from_millis(1)),
            ..self
        }
    }

    /// What ends the name of each lock's release channel. Default
    /// `lock-core:released`: the releases of the lease `{lock:reports:acme}`
    /// go to `{lock:reports:acme}:lock-core:released`, which only processes
    /// waiting for that lock subscribe to. (The lease key comes first so
    /// that, on a cluster, the channel is in the lease's slot.)
    ///
    /// Every process sharing locks must use the same suffix, or waiters in
    /// one will not hear releases from another (they still wake when the
    /// holder's TTL runs out).
    pub fn channel(self, channel: impl Into<String>) -> Self {
        RedisConfig {
            channel: channel.into(),
            ..self
        }
    }

    /// Waits, after every write that grants or prolongs a lease (an
    /// acquire, an extend or renewal, the fencing counter), until `replicas`
    /// replicas have acknowledged it, for at most `timeout`: Redis's `WAIT`,
    /// sent right behind the write on the same connection (on a cluster, to
    /// the node that owns the key). Such writes use connections of their
    /// own, so that no other call waits behind a `WAIT`. Off by default: a lease is granted as
    /// soon as the primary has it, as Redis replicates asynchronously.
    ///
    /// Without it, a primary that dies just after granting a lease may be
    /// replaced by a replica that never saw it, and the next caller is
    /// granted the same name while the first still works. With it, a lease
    /// is only granted once `replicas` replicas have it too:
    ///
    /// - an acquire that fewer replicas acknowledged in time gives the
    ///   lease back (best effort) and fails with
    ///   [`Error::NotReplicated`](crate::Error::NotReplicated);
    /// - an extend that fewer replicas acknowledged fails the same way,
    ///   which renewal treats as any failed renewal: the work's local
    ///   deadline does not move, and it is tried again until then.
    ///
    /// What it does not do: `WAIT` does not make Redis consistent. A replica
    /// that acknowledged can still lose the write in a later failure (it
    /// keeps it in memory, and Sentinel may promote another replica), and a
    /// holder paused past its TTL still overruns it. Fencing tokens, and
    /// the etcd store, are the stronger answers. The
    /// [`RedisStore`](crate::RedisStore#redis-with-replicas) docs say what
    /// the failover tests measured.
    ///
    /// Each such call may take up to `timeout` longer than
    /// [`timeout`](RedisConfig::timeout): its time bound is the two added.
    /// `replicas` of 0 turns it off.
    pub fn replica_acks(self, replicas: u32, timeout: Duration) -> Self {
        RedisConfig {
            acks: (replicas > 0).then_some(ReplicaAcks {
                replicas,
                timeout: timeout.max(Duration::from_millis(1)),
            }),
            ..self
        }
    }
}
