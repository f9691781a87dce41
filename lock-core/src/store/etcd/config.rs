//! [`EtcdConfig`]: how an [`EtcdStore`](super::EtcdStore) behaves.

use std::fmt;
use std::time::Duration;

use crate::store::kit::Tls;

/// How an [`EtcdStore`](super::EtcdStore) behaves: its time bound, its
/// credentials and the certificates of its TLS connections.
///
/// ```
/// use std::time::Duration;
/// use lock_core::{EtcdConfig, Tls};
///
/// let config = EtcdConfig::new()
///     .timeout(Duration::from_secs(2))
///     .user("locks", "s3cret")
///     .tls(Tls::new().ca_file("/etc/etcd/ca.pem"));
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Clone)]
#[must_use = "an EtcdConfig does nothing until passed to EtcdStore::connect_with"]
pub struct EtcdConfig {
    pub(super) timeout: Duration,
    pub(super) user: Option<(String, String)>,
    pub(super) tls: Option<Tls>,
}

impl Default for EtcdConfig {
    fn default() -> Self {
        EtcdConfig {
            timeout: Duration::from_secs(3),
            user: None,
            tls: None,
        }
    }
}

impl EtcdConfig {
    /// The defaults: a 3 s timeout, no authentication, and for `https://`
    /// endpoints the public CAs (the webpki roots) and no client
    /// certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest any one call (connect, acquire, release, extend...) may
    /// take before it fails with [`Error::Store`](crate::Error::Store).
    /// Default 3 s; a zero timeout is raised to 1 ms. During a leader
    /// election calls wait for the new leader within this bound.
    pub fn timeout(self, timeout: Duration) -> Self {
        EtcdConfig {
            timeout: timeout.max(Duration::from_millis(1)),
            ..self
        }
    }

    /// Authenticates as `user` with `password` (etcd's own users and
    /// roles). The password is never shown by `Debug`.
    ///
    /// The store authenticates again whenever etcd refuses its token (a
    /// simple token goes stale after `--auth-token-ttl` unused, a JWT at its
    /// expiry), for its calls and for its watch stream alike, so it keeps
    /// working after an idle spell. The user needs read and write
    /// permission on the locks' keys.
    pub fn user(self, user: impl Into<String>, password: impl Into<String>) -> Self {
        EtcdConfig {
            user: Some((user.into(), password.into())),
            ..self
        }
    }

    /// The CA that vouches for the members and the client certificate to
    /// present, for `https://` endpoints (which need lock-core's
    /// `etcd-tls` feature): with a CA, only that CA is trusted; without
    /// one, the public CAs (the webpki roots) are. A client certificate
    /// answers a cluster started with `--client-cert-auth`.
    ///
    /// TLS is used when the endpoints are `https://`; a `Tls` given for
    /// `http://` endpoints is refused at connect rather than left unused,
    /// and so is a mix of `http://` and `https://` endpoints. Through
    /// [`connect`](crate::connect()), the URL's `sslrootcert`, `sslcert` and
    /// `sslkey` and [`ConnectOptions::tls`](crate::ConnectOptions::tls)
    /// win over this. `Debug` shows where the certificates come from,
    /// never a key.
    ///
    /// The files are read when the store connects, and its client keeps
    /// them: after renewing a client certificate, connect a new store
    /// (the PostgreSQL and memcached stores read renewed files at their
    /// next connection).
    ///
    /// ```
    /// use lock_core::{EtcdConfig, Tls};
    ///
    /// let config = EtcdConfig::new().tls(
    ///     Tls::new()
    ///         .ca_file("/etc/etcd/ca.pem")
    ///         .client_cert_file("/etc/etcd/locks.pem", "/etc/etcd/locks-key.pem"),
    /// );
    /// # let _ = config;
    /// ```
    pub fn tls(self, tls: Tls) -> Self {
        EtcdConfig {
            tls: Some(tls),
            ..self
        }
    }
}

impl fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("timeout", &self.timeout)
            .field("user", &self.user.as_ref().map(|(user, _)| user))
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}
