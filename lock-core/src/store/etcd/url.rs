//! etcd URLs as a store: `etcd://[user:password@]host:port[,host:port...]`
//! (`etcd://` is plain `http://`), or the members' client URLs,
//! `http://host:2379[,http://host:2379...]` (`https://` likewise, over
//! TLS). After the last member, `https://` URLs take the query words every
//! store takes for TLS: `?sslrootcert=PATH&sslcert=PATH&sslkey=PATH`.
//!
//! etcd-client takes the endpoints without credentials, and the user
//! apart ([`EtcdConfig::user`]): this file splits them, reading the URL as
//! every store URL is read ([`StoreUrl`]), so that no password reaches an
//! endpoint list, which errors and `Debug` show.

use super::{EtcdConfig, EtcdStore};
use crate::store::BoxFuture;
use crate::store::kit::{StoreUrl, TLS_WORDS, Tls, invalid_url};
use crate::{ConnectOptions, LockManager, Result};

/// A manager over the etcd cluster `url` names, with `tls` (from
/// [`ConnectOptions::tls`]) over the configuration's for `https://`.
async fn connect(url: &str, config: EtcdConfig, tls: Option<Tls>) -> Result<LockManager> {
    let (endpoints, config) = members(url, config, tls)?;
    Ok(LockManager::new(
        EtcdStore::connect_with(&endpoints, config).await?,
    ))
}

/// The endpoints `url` lists, without credentials, and `config` with the
/// URL's user when it gives one. A member given without a scheme takes the
/// one before it.
///
/// For `https://` members, `config`'s [`Tls`] is overridden by `given`
/// (from [`ConnectOptions::tls`]), and both by the URL's `sslrootcert`,
/// `sslcert` and `sslkey`; those words, or `given` certificates, with plain
/// members are refused rather than left unused.
fn members(
    url: &str,
    mut config: EtcdConfig,
    given: Option<Tls>,
) -> Result<(Vec<String>, EtcdConfig)> {
    const SHAPE: &str = "write etcd://[user:password@]host:port[,host:port...]";
    let urls = StoreUrl::parse_list(url).map_err(|why| invalid_url(url, format!("{why}; {SHAPE}")))?;
    let mut words = Vec::new();
    let mut endpoints = Vec::new();
    let mut user: Option<(String, String)> = None;
    for mut member in urls {
        let scheme = match member.scheme() {
            "etcd" => "http".to_owned(),
            scheme => scheme.to_owned(),
        };
        words.extend(member.take_settings(&TLS_WORDS));
        if member.query().next().is_some() || member.fragment().is_some() {
            return Err(invalid_url(
                url,
                "its query says what etcd URLs do not take: after the last member, \
                 only sslrootcert, sslcert and sslkey (for https://)",
            ));
        }
        if member.path().is_some_and(|path| !path.is_empty()) {
            return Err(invalid_url(
                url,
                format!("each member is host:port, without a path; {SHAPE}"),
            ));
        }
        if member.user().is_some() || member.password().is_some() {
            let named = (
                member.user().unwrap_or_default().to_owned(),
                member.password().unwrap_or_default().to_owned(),
            );
            if user.as_ref().is_some_and(|given| *given != named) {
                return Err(invalid_url(
                    url,
                    "its members carry different credentials; etcd takes one user: \
                     write them once, etcd://user:password@host:port,host:port",
                ));
            }
            user = Some(named);
        }
        endpoints.extend(
            member
                .hosts()
                .iter()
                .map(|host| format!("{scheme}://{host}")),
        );
    }
    if endpoints.is_empty() {
        return Err(invalid_url(url, format!("it names no member; {SHAPE}")));
    }
    let from_url = Tls::from_words(words.iter().map(|(word, value)| (&**word, &**value)))
        .map_err(|why| invalid_url(url, why))?;
    if let Some((name, password)) = user {
        config = config.user(name, password);
    }
    if endpoints.iter().any(|endpoint| endpoint.starts_with("https://")) {
        let mut tls = config.tls.take();
        let words = (!from_url.is_empty()).then_some(from_url);
        for over in given.into_iter().chain(words) {
            tls = Some(tls.unwrap_or_default().overridden_by(over));
        }
        config.tls = tls;
    } else if !words.is_empty() || given.is_some_and(|given| !given.is_empty()) {
        return Err(invalid_url(
            url,
            "a CA or client certificate (sslrootcert, sslcert, sslkey, or ConnectOptions::tls) \
             is for TLS, and these members are plain http (as etcd:// is): write them as \
             https://host:port",
        ));
    }
    Ok((endpoints, config))
}

/// Opens the store a URL of this store's schemes names, set up with
/// `options`: this store's entry in [`connect`](crate::connect)'s table.
pub(crate) fn open(url: &str, options: ConnectOptions) -> BoxFuture<'_, Result<LockManager>> {
    let tls = options.tls_given().cloned();
    Box::pin(connect(url, options.store(EtcdConfig::timeout), tls))
}

impl ConnectOptions {
    /// How an `etcd://` (or `http://`, `https://`) URL's store behaves. A
    /// user given in the URL (`etcd://user:password@host:2379`) wins over
    /// one set with [`EtcdConfig::user`]; for `https://` members,
    /// [`ConnectOptions::tls`] wins over [`EtcdConfig::tls`], and the URL's
    /// `sslrootcert`, `sslcert` and `sslkey` over both.
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
        let url = "etcd://locks:s%40cret@a:2379, b:2379/";
        let (endpoints, config) = members(url, EtcdConfig::new(), None).expect("parse");
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
            members("http://a:1,http://b:2", EtcdConfig::new(), None).expect("parse");
        assert_eq!(endpoints, ["http://a:1", "http://b:2"]);
        assert_eq!(user_of(&config), None);
        let (endpoints, _) = members("https://a:1,b:2", EtcdConfig::new(), None).expect("parse");
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
            let error = members(bad, EtcdConfig::new(), None).expect_err(bad);
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

    #[test]
    fn the_tls_words_follow_the_last_member_and_win_over_the_options() {
        let (endpoints, config) = members(
            "https://locks:pw@a:1,b:2/?sslrootcert=%2Fetc%2Fca.pem&sslcert=c.pem&sslkey=k.pem",
            EtcdConfig::new().tls(Tls::new().ca_file("/configured")),
            Some(Tls::new().ca_file("/options").client_cert_file("oc", "ok")),
        )
        .expect("parse");
        assert_eq!(endpoints, ["https://a:1", "https://b:2"]);
        assert_eq!(
            config.tls,
            Some(
                Tls::new()
                    .ca_file("/etc/ca.pem")
                    .client_cert_file("c.pem", "k.pem")
            ),
            "the URL's words win over the options' and the configuration's"
        );
        let (_, config) = members(
            "https://a:1",
            EtcdConfig::new().tls(Tls::new().ca_file("/configured").client_cert_file("c", "k")),
            Some(Tls::new().ca_file("/options")),
        )
        .expect("parse");
        assert_eq!(
            config.tls,
            Some(Tls::new().ca_file("/options").client_cert_file("c", "k")),
            "the options' CA over the configuration's, its client certificate kept"
        );
        let (_, config) = members("https://a:1", EtcdConfig::new(), None).expect("parse");
        assert_eq!(config.tls, None, "nothing given: the public CAs");
        let refused = members("etcd://a:1", EtcdConfig::new(), Some(Tls::new().ca_file("/o")))
            .expect_err("certificates are never left unused on plain members");
        assert!(refused.to_string().contains("https://"), "{refused}");
    }

    #[test]
    fn tls_words_on_plain_members_or_without_their_pair_are_refused() {
        for (bad, says) in [
            ("etcd://a:1?sslrootcert=/ca.pem", "https://"),
            ("http://a:1,http://b:2?sslrootcert=/ca.pem", "https://"),
            ("https://a:1?sslcert=/c.pem", "sslkey"),
            ("https://a:1?sslkey=/k.pem", "sslcert"),
            ("https://a:1?sslrootcert=", "path"),
            ("https://u:hunter2@a:1?timeout=3", "sslrootcert"),
        ] {
            let error = members(bad, EtcdConfig::new(), None).expect_err(bad);
            let text = error.to_string();
            assert!(
                matches!(error, crate::Error::InvalidUrl { .. }),
                "{bad}: {error:?}"
            );
            assert!(text.contains(says), "{bad}: {text}");
            assert!(!text.contains("hunter2"), "{bad}: password shown: {text}");
        }
    }
}
