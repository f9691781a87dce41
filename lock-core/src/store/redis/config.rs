//! [`RedisConfig`]: how a [`RedisStore`](super::RedisStore) behaves.

use std::time::Duration;

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
}

impl Default for RedisConfig {
    fn default() -> Self {
        RedisConfig {
            timeout: DEFAULT_TIMEOUT,
            channel: DEFAULT_CHANNEL.to_owned(),
        }
    }
}

impl RedisConfig {
    /// The defaults: a 3 s timeout and the channel suffix `lock-core:released`.
    pub fn new() -> Self {
        Self::default()
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
}
