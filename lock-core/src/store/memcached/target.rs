//! Where a [`MemcachedStore`](super::MemcachedStore) connects, read from its
//! URL: `memcache://host[:port]`, or `memcaches://host[:port]` for TLS with
//! the certificates of `?sslrootcert=PATH&sslcert=PATH&sslkey=PATH` (or of
//! the configuration's [`Tls`]).

use crate::store::kit::{StoreUrl, TLS_WORDS, Tls, invalid_url};
use crate::{Error, Result};

/// memcached's port when the URL names none.
const DEFAULT_PORT: u16 = 11211;

/// The server a URL names, and how to reach it.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Target {
    /// `host:port`, as dialled and as shown in errors.
    pub(super) address: String,
    /// The host alone (an IPv6 address without its brackets): the name the
    /// server's certificate must carry.
    #[cfg_attr(not(feature = "memcached-tls"), allow(dead_code))]
    pub(super) host: String,
    /// The certificates, for a `memcaches://` URL; `None` for plain TCP.
    pub(super) tls: Option<Tls>,
}

/// The server `url` names, read as every store URL is read
/// ([`StoreUrl`]). `configured` is the [`Tls`] of the store's
/// configuration, which the URL's words win over.
pub(super) fn target(url: &str, configured: &Tls) -> Result<Target> {
    let refuse = |why: &str| {
        invalid_url(
            url,
            format!("{why}; use a URL like memcache://127.0.0.1:11211 or memcaches://cache.internal:11211?sslrootcert=/etc/ca.pem"),
        )
    };
    let mut parsed = StoreUrl::parse(url).map_err(|why| refuse(&why))?;
    let tls = match parsed.scheme() {
        "memcache" | "memcached" => false,
        "memcaches" => true,
        _ => return Err(refuse("the URL must start with memcache:// or memcaches://")),
    };
    if tls && !cfg!(feature = "memcached-tls") {
        return Err(refuse(
            "`memcaches://` URLs (TLS) need lock-core's `memcached-tls` feature: enable it",
        ));
    }
    let words = parsed.take_settings(&TLS_WORDS);
    if !words.is_empty() && !tls {
        return Err(refuse(
            "`sslrootcert`, `sslcert` and `sslkey` are for TLS: use a memcaches:// URL to connect with TLS",
        ));
    }
    if !tls && !configured.is_empty() {
        return Err(Error::invalid_config(
            "memcached",
            "a CA or client certificate is given (MemcachedConfig::tls or ConnectOptions::tls), and memcache:// is plain TCP: use a memcaches:// URL to connect with TLS",
        ));
    }
    let words = Tls::from_words(words.iter().map(|(word, value)| (&**word, &**value)))
        .map_err(|why| refuse(&why))?;
    if parsed.query().next().is_some() || parsed.fragment().is_some() {
        return Err(refuse(
            "the URL's query may hold only `sslrootcert`, `sslcert` and `sslkey` (with memcaches://)",
        ));
    }
    if parsed.user().is_some() || parsed.password().is_some() {
        return Err(refuse(
            "memcached's meta protocol has no authentication (SASL needs the binary protocol); keep memcached on a private network and leave credentials out of the URL",
        ));
    }
    let [host] = parsed.hosts() else {
        return Err(refuse("give exactly one server, as host or host:port"));
    };
    if parsed.path().is_some_and(|path| !path.is_empty()) {
        return Err(refuse("give exactly one server, as host or host:port, with no path"));
    }
    Ok(Target {
        address: format!("{}:{}", host.name(), host.port().unwrap_or(DEFAULT_PORT)),
        host: host.bare().to_owned(),
        tls: tls.then(|| configured.clone().overridden_by(words)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(url: &str) -> Result<String> {
        target(url, &Tls::new()).map(|target| target.address)
    }

    // One server, named as host:port, with the default port filled in;
    // anything else is an error that shows the URL form.
    #[test]
    fn a_url_names_one_server_and_nothing_else() {
        assert_eq!(
            address("memcache://10.0.0.5").expect("host"),
            "10.0.0.5:11211"
        );
        assert_eq!(
            address("memcache://cache.internal:11311/").expect("host:port"),
            "cache.internal:11311"
        );
        assert_eq!(address("memcache://[::1]").expect("ipv6"), "[::1]:11211");
        assert_eq!(
            address("MEMCACHE://cache:11311").expect("a scheme in capitals"),
            "cache:11311",
            "`connect` hands such a URL to this store: it must not refuse it"
        );
        for bad in [
            "redis://127.0.0.1",
            "memcache://",
            "memcache://:11211",
            "memcache://a:1,b:2",
            "memcache://user:secret@host",
            "memcache://host?timeout=3",
        ] {
            let error = address(bad).expect_err(bad).chain().to_string();
            assert!(error.contains("memcache://"), "{bad}: {error}");
            assert!(!error.contains("secret"), "never shows a password: {error}");
        }
    }

    // The certificates' words ask for TLS, which only `memcaches://` gives:
    // on a plain URL they would be silently ignored, and the connection
    // left unencrypted.
    #[test]
    fn certificates_in_a_plain_url_are_refused_with_the_scheme_to_use() {
        for url in [
            "memcache://h:1?sslrootcert=/ca.pem",
            "memcached://h?sslcert=/c.pem&sslkey=/k.pem",
        ] {
            let error = address(url).expect_err(url).chain().to_string();
            assert!(error.contains("use a memcaches:// URL"), "{url}: {error}");
        }
        // Certificates from the configuration (or ConnectOptions::tls) too.
        let configured = Tls::new().ca_file("/ca.pem");
        let error = target("memcache://h:1", &configured)
            .err()
            .map(|e| e.chain().to_string())
            .unwrap_or_default();
        assert!(error.contains("use a memcaches:// URL"), "{error}");
    }

    #[cfg(feature = "memcached-tls")]
    #[test]
    fn a_tls_url_names_its_server_and_its_certificates() {
        let plain = target("memcache://h", &Tls::new()).expect("plain");
        assert_eq!(plain.tls, None, "memcache:// is plain TCP");
        let tls = target("memcaches://cache.internal", &Tls::new()).expect("no words");
        assert_eq!(
            tls,
            Target {
                address: "cache.internal:11211".to_owned(),
                host: "cache.internal".to_owned(),
                tls: Some(Tls::new()),
            },
            "the default port, and the public CAs"
        );
        let tls = target(
            "MEMCACHES://[::1]:11311/?sslrootcert=%2Fetc%2Fca.pem&sslcert=/c.pem&sslkey=/k.pem",
            &Tls::new(),
        )
        .expect("words");
        assert_eq!(tls.address, "[::1]:11311");
        assert_eq!(tls.host, "::1", "the certificate names the address bare");
        assert_eq!(
            tls.tls,
            Some(
                Tls::new()
                    .ca_file("/etc/ca.pem")
                    .client_cert_file("/c.pem", "/k.pem")
            )
        );
        let configured = Tls::new().ca_file("/configured.pem").client_cert_pem("C", "K");
        let tls = target("memcaches://10.0.0.5:1?sslrootcert=/url.pem", &configured)
            .expect("words over the configuration");
        assert_eq!(tls.host, "10.0.0.5");
        assert_eq!(
            tls.tls,
            Some(Tls::new().ca_file("/url.pem").client_cert_pem("C", "K")),
            "the URL's CA, the configuration's client certificate"
        );
        for (url, named) in [
            ("memcaches://h?sslcert=/c.pem", "sslkey"),
            ("memcaches://h?sslkey=/k.pem", "sslcert"),
            ("memcaches://h?sslrootcert=", "path"),
            ("memcaches://h?sslrootcert=/ca.pem&sslmode=require", "query"),
            ("memcaches://u:secret@h", "credentials"),
        ] {
            let error = address(url).expect_err(url).chain().to_string();
            assert!(error.contains(named), "{url}: {error}");
            assert!(!error.contains("secret"), "never shows a password: {error}");
        }
    }

    #[cfg(not(feature = "memcached-tls"))]
    #[test]
    fn a_tls_url_without_the_tls_feature_names_the_feature() {
        let error = address("memcaches://h:1?sslrootcert=/ca.pem")
            .expect_err("no TLS in this build")
            .chain()
            .to_string();
        assert!(
            error.contains("enable") && error.contains("`memcached-tls`"),
            "{error}"
        );
    }
}
