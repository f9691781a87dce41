//! Connecting an [`EtcdStore`]: reaching the cluster (over TLS for
//! `https://` endpoints, authenticated when the configuration names a
//! user), reading the shortest lease it grants, and starting the watch
//! stream.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use etcd_client::{Client, ConnectOptions};

use super::watch::Watches;
use super::{EtcdConfig, EtcdStore, Shared, tls};
use crate::store::kit::{Background, Deadline, Reopen, Waiters};
use crate::{Error, Result};

impl EtcdStore {
    /// Connects to an etcd cluster through `endpoints`
    /// (`http://host:2379`, or `https://host:2379` with the `etcd-tls`
    /// feature), with the default [`EtcdConfig`]. Give every member:
    /// requests go to any that answers.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidConfig`] when no endpoint is given; when the
    ///   endpoints mix `http://` and `https://`, or are `https://` (or a
    ///   [`Tls`](crate::Tls) is given) in a build without the `etcd-tls`
    ///   feature; when a certificate file is missing or holds no
    ///   certificate;
    /// - [`Error::Store`] when no endpoint answers within the timeout, or
    ///   the TLS handshake fails, its cause said (the server's certificate
    ///   not signed by the CA given, a client certificate the server wants
    ///   and was not given).
    pub async fn connect<E: AsRef<str>>(endpoints: &[E]) -> Result<EtcdStore> {
        Self::connect_with(endpoints, EtcdConfig::default()).await
    }

    /// Connects with `config`.
    ///
    /// # Errors
    ///
    /// As [`connect`](EtcdStore::connect).
    pub async fn connect_with<E: AsRef<str>>(
        endpoints: &[E],
        config: EtcdConfig,
    ) -> Result<EtcdStore> {
        let endpoints: Vec<String> = endpoints
            .iter()
            .map(|endpoint| endpoint.as_ref().to_owned())
            .collect();
        Self::open(endpoints, config, true).await
    }

    /// Connects to `endpoints`; with `reopens`, a store that can open
    /// itself again that way ([`LockStore::reopen`](crate::LockStore::reopen)).
    async fn open(endpoints: Vec<String>, config: EtcdConfig, reopens: bool) -> Result<EtcdStore> {
        let reopen = reopens.then(|| reopen(&endpoints, &config));
        let shown = endpoints.join(",");
        if endpoints.is_empty() {
            return Err(Error::invalid_config(
                "etcd",
                "no endpoints were given; pass the members' client URLs, like \"http://127.0.0.1:2379\"",
            ));
        }
        let options = ConnectOptions::new()
            .with_connect_timeout(config.timeout)
            .with_timeout(config.timeout)
            .with_keep_alive(Duration::from_secs(5), config.timeout);
        let (mut options, over_tls) = tls::apply(options, &endpoints, config.tls.as_ref())
            .map_err(|why| Error::invalid_config("etcd", why))?;
        if let Some((user, password)) = &config.user {
            // etcd forgets a token once it goes unused for its
            // `--auth-token-ttl` (or, for JWT tokens, once it expires): a
            // call refused for its token authenticates again and is sent
            // once more, all within the call's deadline.
            options = options
                .with_user(user.clone(), password.clone())
                .with_auto_token_refresh(true);
        }
        let started = Instant::now();
        let deadline = Deadline::after(config.timeout, "EtcdConfig::timeout");
        let connecting = async {
            let mut client = Client::connect(&endpoints, Some(options)).await?;
            // The cluster's shortest lease: grant one second, see what it
            // gives, and hand it back.
            let probe = client.lease_grant(1, None).await?;
            let min_ttl = Duration::from_secs(probe.ttl().max(1).unsigned_abs());
            client.lease_revoke(probe.id()).await?;
            // Readers need range compares (etcd 3.3): an older server
            // would ignore the range and let a writer in beside readers.
            // A member that will not say (a user without the right) is
            // taken to be current.
            let ranges = match client.status().await {
                Ok(status) => compares_ranges(status.version()),
                Err(_) => true,
            };
            Ok::<_, etcd_client::Error>((client, min_ttl, ranges))
        };
        let (client, min_ttl, ranges) = match deadline.bound(connecting).await {
            Ok(connected) => connected,
            Err(e) => {
                let left = config.timeout.saturating_sub(started.elapsed());
                let why = tls::failure(e, &endpoints, over_tls.as_ref(), left).await;
                return Err(Error::store("connect", shown, why));
            }
        };
        let waiters = Arc::new(Waiters::default());
        let mut tasks = Background::new();
        let watches = Watches::start(
            client.clone(),
            Arc::clone(&waiters),
            config.timeout,
            &mut tasks,
        );
        Ok(EtcdStore {
            shared: Arc::new(Shared {
                client,
                watches,
                waiters,
                config,
                min_ttl,
                ranges,
                endpoints,
                reopen,
                _tasks: tasks,
            }),
        })
    }

    /// The configuration the store runs with.
    pub fn config(&self) -> &EtcdConfig {
        &self.shared.config
    }

    /// The shortest TTL the cluster grants (read when the store connected).
    pub fn min_ttl(&self) -> Duration {
        self.shared.min_ttl
    }
}

/// Whether etcd `version` (`"3.4.23"`) compares key ranges in
/// transactions: 3.3 and later. A version it cannot read is taken to.
fn compares_ranges(version: &str) -> bool {
    let mut parts = version.split('.').map(|part| part.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= (3, 3),
        _ => true,
    }
}

/// How a store connected to `endpoints` opens itself again
/// ([`LockStore::reopen`](crate::LockStore::reopen)).
fn reopen(endpoints: &[String], config: &EtcdConfig) -> Reopen {
    let (endpoints, config) = (endpoints.to_vec(), config.clone());
    Reopen::new(move || EtcdStore::open(endpoints.clone(), config.clone(), false))
}

#[cfg(test)]
mod tests {
    use super::compares_ranges;

    #[test]
    fn range_compares_came_with_etcd_3_3() {
        assert!(compares_ranges("3.4.23"));
        assert!(compares_ranges("3.3.0"));
        assert!(compares_ranges("3.10.1"));
        assert!(!compares_ranges("3.2.32"));
        assert!(compares_ranges("unknown"));
    }
}
