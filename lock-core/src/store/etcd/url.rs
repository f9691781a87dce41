//! etcd URLs as a store: `etcd://[user:password@]host:port[,host:port...]`
//! (`etcd://` is plain `http://`), or the members' client URLs,
//! `http://host:2379[,http://host:2379...]` (`https://` likewise).
//!
//! etcd-client takes the endpoints without credentials, and the user
//! apart ([`EtcdConfig::user`]): this file splits them, so that no
//! password reaches an endpoint list, which errors and `Debug` show.

use super::{EtcdConfig, EtcdStore};
use crate::store::BoxFuture;
use crate::store::kit::{invalid_url, percent_decode, scheme};
use crate::{ConnectOptions, LockManager, Result};

/// A manager over the etcd cluster `url` names.
async fn connect(url: &str, config: EtcdConfig) -> Result<LockManager> {
    let (endpoints, config) = members(url, config)?;
    Ok(LockManager::new(
        EtcdStore::connect_with(&endpoints, config).await?,
    ))
}

/// The endpoints `url` lists, without credentials, and `config` with the
/// URL's user when it gives one. A member given without a scheme takes the
/// one before it.
fn members(url: &str, mut config: EtcdConfig) -> Result<(Vec<String>, EtcdConfig)> {
    let mut endpoints = Vec::new();
    let mut user: Option<(String, String)> = None;
    let mut last_scheme = String::from("http");
    for part in url.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let rest = match scheme(part) {
            Some((scheme, rest)) => {
                last_scheme = if scheme == "etcd" {
                    "http".to_owned()
                } else {
                    scheme.into_owned()
                };
                rest
            }
            None => part,
        };
        let host = match rest.rfind('@') {
            Some(at) => {
                let (name, password) = rest[..at].split_once(':').unwrap_or((&rest[..at], ""));
                let decoded = (
                    percent_decode(name).map_err(|why| invalid_url(url, why))?,
                    percent_decode(password).map_err(|why| invalid_url(url, why))?,
                );
                if user.as_ref().is_some_and(|given| *given != decoded) {
                    return Err(invalid_url(
                        url,
                        "its members carry different credentials; etcd takes one user: \
                         write them once, etcd://user:password@host:port,host:port",
                    ));
                }
                user = Some(decoded);
                &rest[at + 1..]
            }
            None => rest,
        };
        let host = host.trim_end_matches('/');
        if host.is_empty() || host.contains('/') {
            return Err(invalid_url(
                url,
                "each member is host:port, without a path; \
                 write etcd://[user:password@]host:port[,host:port...]",
            ));
        }
        endpoints.push(format!("{last_scheme}://{host}"));
    }
    if endpoints.is_empty() {
        return Err(invalid_url(
            url,
            "it names no member; write etcd://[user:password@]host:port[,host:port...]",
        ));
    }
    if let Some((name, password)) = user {
        config = config.user(name, password);
    }
    Ok((endpoints, config))
}

/// Opens the store a URL of this store's schemes names, set up with
/// `options`: this store's entry in [`connect`](crate::connect)'s table.
pub(crate) fn open(url: &str, options: ConnectOptions) -> BoxFuture<'_, Result<LockManager>> {
    Box::pin(connect(url, options.store(EtcdConfig::timeout)))
}

impl ConnectOptions {
    /// How an `etcd://` (or `http://`) URL's store behaves. A user given in
    /// the URL (`etcd://user:password@host:2379`) wins over one set with
    /// [`EtcdConfig::user`].
    pub fn etcd(self, config: EtcdConfig) -> Self {
        self.with_store(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user_of(config: &EtcdConfig) -> Option<(String, String)> {
        config.user.clone()
    }

    #[test]
    fn an_etcd_url_lists_its_members_over_http_and_gives_its_user_apart() {
        let (endpoints, config) =
            members("etcd://locks:s%40cret@a:2379, b:2379/", EtcdConfig::new()).expect("parse");
        assert_eq!(endpoints, ["http://a:2379", "http://b:2379"]);
        assert_eq!(
            user_of(&config),
            Some(("locks".to_owned(), "s@cret".to_owned())),
            "the user, its escapes decoded"
        );
        assert!(
            !endpoints.concat().contains("cret"),
            "no password in the endpoints, which errors and Debug show"
        );
        let (endpoints, config) =
            members("http://a:1,http://b:2", EtcdConfig::new()).expect("parse");
        assert_eq!(endpoints, ["http://a:1", "http://b:2"]);
        assert_eq!(user_of(&config), None);
        let (endpoints, _) = members("https://a:1,b:2", EtcdConfig::new()).expect("parse");
        assert_eq!(
            endpoints,
            ["https://a:1", "https://b:2"],
            "a member without a scheme takes the one before it"
        );
    }

    #[test]
    fn an_etcd_url_without_members_or_with_two_users_is_refused_without_its_password() {
        for bad in [
            "etcd://",
            "etcd://u:hunter2@a:1,http://v:hunter2@b:2",
            "etcd://u:hunter2@a:1/keys",
        ] {
            let error = members(bad, EtcdConfig::new()).expect_err(bad);
            let text = error.to_string();
            assert!(
                matches!(error, crate::Error::InvalidUrl { .. }),
                "{bad}: {error:?}"
            );
            assert!(
                text.contains("etcd://"),
                "{bad}: says how to write one: {text}"
            );
            assert!(!text.contains("hunter2"), "{bad}: password shown: {text}");
        }
    }
}
