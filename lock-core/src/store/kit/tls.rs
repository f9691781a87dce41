//! [`Tls`]: the certificates a store's TLS connections use, given the same
//! way to every store: a configuration method (`PostgresConfig::tls`,
//! `EtcdConfig::tls`, `MemcachedConfig::tls`,
//! [`ConnectOptions::tls`](crate::ConnectOptions::tls)) or the URL's
//! `sslrootcert`, `sslcert` and `sslkey` (libpq's words, for every store).
//!
//! With a TLS feature, the rustls client configuration is built here too:
//! one provider (ring), the webpki roots when no CA is given, and the three
//! levels of checking PostgreSQL's `sslmode` names.
// Without a networked store, only the public `Tls` is used.
#![cfg_attr(
    not(any(
        feature = "redis",
        feature = "memcached",
        feature = "postgres",
        feature = "etcd"
    )),
    allow(dead_code)
)]

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::deadline::BoxError;

/// The URL query words that give a [`Tls`]: the CA's file, the client
/// certificate's file and its key's file.
pub(crate) const WORDS: [&str; 3] = ["sslrootcert", "sslcert", "sslkey"];

/// The certificates for a store's TLS connections: the CA that vouches for
/// the server and, when the server asks for one, the client's certificate
/// and key. Each is PEM, from a file or given in memory.
///
/// Without a CA, the server's certificate must chain to a public CA (the
/// webpki roots, Mozilla's list; PostgreSQL asks for them by name,
/// `sslrootcert=system`). The scheme or the URL's `sslmode` says whether
/// TLS is used at all; `Tls` says with which certificates, and a `Tls`
/// given for a plain connection is refused rather than left unused. Files
/// are read when the store connects; the PostgreSQL and memcached stores
/// read them again when they change (a renewed certificate), at their next
/// connection.
///
/// Every store takes the same settings: in its URL, as the query words
/// `sslrootcert=PATH`, `sslcert=PATH` and `sslkey=PATH` (libpq's names), or
/// through its configuration's `tls` method or
/// [`ConnectOptions::tls`](crate::ConnectOptions::tls). Words in the URL
/// win over a configuration's.
///
/// Each store's TLS is behind a feature of its own, over rustls with the
/// ring provider. Without it, a URL or setting that needs TLS is refused at
/// connect, naming the feature.
///
/// | store | feature | TLS when | what is checked of the server's certificate |
/// |---|---|---|---|
/// | PostgreSQL | `postgres-tls` | the URL's `sslmode` (`prefer`, `require`, `verify-ca`, `verify-full`), or a certificate given (or libpq's `PGSSLMODE`, `PGSSLROOTCERT`... where the URL names none); without either, plain; with `prefer`, plain text too when the server answers that it has no TLS, CA or not | as libpq: `verify-full` the CA and the host name; `verify-ca`, and any mode with a CA, the CA (with `prefer`, only once the server answers in TLS); `prefer` and `require` without a CA nothing ([the table](https://docs.rs/lock-core/latest/lock_core/store/struct.PostgresStore.html#tls)) |
/// | etcd | `etcd-tls` | `https://` members | the CA and the host name |
/// | memcached | `memcached-tls` | `memcaches://` (memcached 1.6 started with `-Z`) | the CA and the host name |
/// | Redis | `redis-tls` | `rediss://`, `rediss+cluster://`, `rediss+sentinel://` | the CA and the host name; a `Tls` of your own for one server only: cluster and Sentinel URLs refuse it (their servers need a publicly signed certificate, or a client built with the redis crate) |
///
/// A connect that fails for a certificate says why and what to change: a
/// server certificate no trusted CA signed names `sslrootcert`, a missing
/// or untrusted client certificate `sslcert` and `sslkey`, a certificate
/// for another host the names to dial.
///
/// ```
/// use lock_core::Tls;
///
/// let tls = Tls::new()
///     .ca_file("/etc/locks/ca.pem")
///     .client_cert_file("/etc/locks/client.pem", "/etc/locks/client.key");
/// // Debug shows where the certificates come from, never a key's bytes.
/// assert!(format!("{tls:?}").contains("client.key"));
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
#[must_use = "a Tls does nothing until given to a store's configuration"]
pub struct Tls {
    ca: Option<Pem>,
    identity: Option<(Pem, Pem)>,
}

/// A client certificate's PEM and its key's.
pub(crate) type Identity<'a> = (Cow<'a, [u8]>, Cow<'a, [u8]>);

/// Where one PEM document comes from.
#[derive(Clone, PartialEq, Eq)]
enum Pem {
    File(PathBuf),
    Bytes(Arc<[u8]>),
}

impl fmt::Debug for Pem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pem::File(path) => write!(f, "{}", path.display()),
            Pem::Bytes(bytes) => write!(f, "({} bytes of PEM)", bytes.len()),
        }
    }
}

impl fmt::Debug for Tls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tls")
            .field("ca", &self.ca)
            .field("client_cert", &self.identity.as_ref().map(|(cert, _)| cert))
            .field("client_key", &self.identity.as_ref().map(|(_, key)| key))
            .finish()
    }
}

impl Pem {
    /// The document's bytes; `what` names it in the error.
    fn read(&self, what: &str) -> Result<Cow<'_, [u8]>, String> {
        match self {
            Pem::File(path) => std::fs::read(path).map(Cow::Owned).map_err(|e| {
                format!(
                    "could not read the {what} file {}: {e}; give the path of a PEM file this process can read",
                    path.display()
                )
            }),
            Pem::Bytes(bytes) => Ok(Cow::Borrowed(bytes)),
        }
    }
}

impl Tls {
    /// No CA of the application's own (the public CAs vouch for the
    /// server) and no client certificate.
    pub fn new() -> Self {
        Self::default()
    }

    /// Trusts the CA certificates in the PEM file at `path` (and only
    /// them) to vouch for the server: the URL word `sslrootcert`.
    pub fn ca_file(self, path: impl Into<PathBuf>) -> Self {
        Tls {
            ca: Some(Pem::File(path.into())),
            ..self
        }
    }

    /// As [`ca_file`](Tls::ca_file), with the PEM given in memory.
    pub fn ca_pem(self, pem: impl Into<Vec<u8>>) -> Self {
        Tls {
            ca: Some(Pem::Bytes(pem.into().into())),
            ..self
        }
    }

    /// Presents the certificate (chain) in the PEM file `cert`, with the
    /// private key in the PEM file `key`, when the server asks for a
    /// client certificate: the URL words `sslcert` and `sslkey`.
    pub fn client_cert_file(self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        Tls {
            identity: Some((Pem::File(cert.into()), Pem::File(key.into()))),
            ..self
        }
    }

    /// As [`client_cert_file`](Tls::client_cert_file), with the PEM given
    /// in memory. `Debug` shows only the sizes.
    pub fn client_cert_pem(self, cert: impl Into<Vec<u8>>, key: impl Into<Vec<u8>>) -> Self {
        Tls {
            identity: Some((
                Pem::Bytes(cert.into().into()),
                Pem::Bytes(key.into().into()),
            )),
            ..self
        }
    }

    /// Whether it names a CA.
    pub(crate) fn has_ca(&self) -> bool {
        self.ca.is_some()
    }

    /// The stamp of its files now: a file that changed (a rotated
    /// certificate) changes it. PEM given in memory never changes.
    #[cfg_attr(
        not(any(feature = "postgres-tls", feature = "memcached-tls")),
        allow(dead_code)
    )]
    pub(crate) fn stamp(&self) -> Stamp {
        let files = [
            self.ca.as_ref(),
            self.identity.as_ref().map(|(cert, _)| cert),
            self.identity.as_ref().map(|(_, key)| key),
        ];
        files
            .into_iter()
            .flatten()
            .filter_map(|pem| match pem {
                Pem::File(path) => Some(std::fs::metadata(path).ok().map(|meta| {
                    #[cfg(unix)]
                    let inode = {
                        use std::os::unix::fs::MetadataExt;
                        (meta.ino(), meta.ctime(), meta.ctime_nsec())
                    };
                    #[cfg(not(unix))]
                    let inode = (0, 0, 0);
                    (meta.len(), meta.modified().ok(), inode.0, inode.1, inode.2)
                })),
                Pem::Bytes(_) => None,
            })
            .collect()
    }

    /// Whether it names a client certificate.
    pub(crate) fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// The same without its CA: the public CAs are trusted instead.
    pub(crate) fn without_ca(self) -> Tls {
        Tls { ca: None, ..self }
    }

    /// Whether it names no CA and no client certificate.
    pub(crate) fn is_empty(&self) -> bool {
        self.ca.is_none() && self.identity.is_none()
    }

    /// `self`, with what `over` sets put in place of its own.
    pub(crate) fn overridden_by(self, over: Tls) -> Tls {
        Tls {
            ca: over.ca.or(self.ca),
            identity: over.identity.or(self.identity),
        }
    }

    /// The CA's PEM, when one was given.
    pub(crate) fn ca_bytes(&self) -> Result<Option<Cow<'_, [u8]>>, String> {
        self.ca
            .as_ref()
            .map(|ca| ca.read("CA (sslrootcert)"))
            .transpose()
    }

    /// The client certificate's and key's PEM, when they were given.
    pub(crate) fn identity_bytes(&self) -> Result<Option<Identity<'_>>, String> {
        match &self.identity {
            Some((cert, key)) => Ok(Some((
                cert.read("client certificate (sslcert)")?,
                key.read("client key (sslkey)")?,
            ))),
            None => Ok(None),
        }
    }

    /// The [`Tls`] that `words` (`sslrootcert`, `sslcert`, `sslkey` and
    /// their values, as a URL's query gives them) give, or why they give
    /// none.
    pub(crate) fn from_words<'a>(
        words: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Tls, String> {
        let (mut ca, mut cert, mut key) = (None, None, None);
        for (word, value) in words {
            let slot = match word {
                "sslrootcert" => &mut ca,
                "sslcert" => &mut cert,
                "sslkey" => &mut key,
                _ => continue,
            };
            if value.is_empty() {
                return Err(format!("`{word}` is empty; give it a file's path"));
            }
            *slot = Some(PathBuf::from(value));
        }
        let identity = match (cert, key) {
            (Some(cert), Some(key)) => Some((Pem::File(cert), Pem::File(key))),
            (None, None) => None,
            (Some(_), None) => {
                return Err(
                    "`sslcert` is given without `sslkey`; give the client key's file too"
                        .to_owned(),
                );
            }
            (None, Some(_)) => {
                return Err(
                    "`sslkey` is given without `sslcert`; give the client certificate's file too"
                        .to_owned(),
                );
            }
        };
        Ok(Tls {
            ca: ca.map(Pem::File),
            identity,
        })
    }
}

/// How much of the server's certificate a TLS connection checks: the
/// levels of PostgreSQL's `sslmode`.
#[cfg(any(
    feature = "postgres-tls",
    feature = "memcached-tls",
    feature = "etcd-tls"
))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Its chain to a trusted CA, and that it names the host dialled
    /// (`verify-full`).
    Full,
    /// Its chain to a trusted CA only (`verify-ca`).
    Chain,
    /// Nothing: encryption without knowing who answers (`require`,
    /// `prefer`).
    Nothing,
}

#[cfg(any(
    feature = "postgres-tls",
    feature = "memcached-tls",
    feature = "etcd-tls"
))]
pub(crate) use rustls_config::client_config;

#[cfg(any(
    feature = "postgres-tls",
    feature = "memcached-tls",
    feature = "etcd-tls"
))]
mod rustls_config;

#[cfg(any(feature = "postgres-tls", feature = "memcached-tls"))]
pub(crate) use reload::Reloading;

#[cfg(any(feature = "postgres-tls", feature = "memcached-tls"))]
mod reload;

/// What a [`Tls`]'s files were when last looked at, to tell when one has
/// changed: each one's length, time of change and, on Unix, its inode and
/// the time its inode changed (which a copy that keeps the time of change,
/// `cp -p`, still moves).
pub(crate) type Stamp = Vec<Option<(u64, Option<std::time::SystemTime>, u64, i64, i64)>>;

/// `error`, with what to do about it when it is one of the usual TLS
/// failures (an unknown CA, a missing client certificate, a server that
/// does not speak TLS): its whole chain then goes into one message.
pub(crate) fn explained(error: BoxError) -> BoxError {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    match hint(&text) {
        Some(hint) => format!("{text}; {hint}").into(),
        None => error,
    }
}

/// What to do about a TLS failure, from its text: the cause said in the
/// words a user acts on, or `None` when it is not one of the usual ones.
pub(crate) fn hint(failure: &str) -> Option<&'static str> {
    let lower = failure.to_ascii_lowercase();
    if lower.contains("unknownissuer") || lower.contains("unknown issuer") {
        Some(
            "the server's certificate is not signed by a CA this client trusts: give the CA that signed it (sslrootcert=PATH, or Tls::ca_file)",
        )
    } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        Some(
            "the server's certificate does not name the host dialled: connect by a name the certificate lists",
        )
    } else if lower.contains("no encryption") {
        Some(
            "the server takes only TLS connections: ask for TLS (sslmode=verify-full with sslrootcert=PATH, or sslmode=require)",
        )
    } else if lower.contains("unknownca") || lower.contains("unknown ca") {
        Some(
            "the server does not trust the client certificate's CA: give a client certificate (sslcert, sslkey) signed by a CA the server trusts",
        )
    } else if lower.contains("certificaterequired")
        || lower.contains("certificate required")
        || lower.contains("bad certificate")
        || lower.contains("badcertificate")
        || lower.contains("peer did not return a certificate")
        || lower.contains("requires a valid client certificate")
    {
        Some(
            "the server wants a client certificate it trusts: give one (sslcert=PATH&sslkey=PATH, or Tls::client_cert_file)",
        )
    } else if lower.contains("corrupt message")
        || lower.contains("invalidcontenttype")
        || lower.contains("invalid content type")
        || lower.contains("wrong version number")
    {
        Some("the server did not answer in TLS: check that it serves TLS on this port")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_certificate_needs_its_key_and_no_word_is_empty() {
        let given = |words: &[(&'static str, &'static str)]| Tls::from_words(words.iter().copied());
        assert!(
            given(&[("sslcert", "c")])
                .expect_err("no key")
                .contains("sslkey")
        );
        assert!(
            given(&[("sslkey", "k")])
                .expect_err("no cert")
                .contains("sslcert")
        );
        assert!(
            given(&[("sslrootcert", "")])
                .expect_err("empty")
                .contains("path")
        );
        let tls =
            given(&[("sslrootcert", "/ca"), ("sslcert", "c"), ("sslkey", "k")]).expect("all three");
        assert_eq!(tls, Tls::new().ca_file("/ca").client_cert_file("c", "k"));
        assert!(given(&[]).expect("none").is_empty());
    }

    #[test]
    fn debug_shows_where_the_certificates_are_never_a_keys_bytes() {
        let tls = Tls::new().client_cert_pem("CERT", "-----BEGIN PRIVATE KEY----- secret");
        let shown = format!("{tls:?}");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("bytes of PEM"), "{shown}");
    }

    #[test]
    fn words_in_the_url_win_over_the_configurations() {
        let configured = Tls::new().ca_file("/a").client_cert_file("c", "k");
        let merged = configured.overridden_by(Tls::new().ca_file("/b"));
        assert_eq!(merged, Tls::new().ca_file("/b").client_cert_file("c", "k"));
    }

    #[test]
    fn the_usual_tls_failures_are_told_in_words_to_act_on() {
        assert!(
            hint("invalid peer certificate: UnknownIssuer")
                .is_some_and(|h| h.contains("sslrootcert"))
        );
        assert!(
            hint("received fatal alert: CertificateRequired")
                .is_some_and(|h| h.contains("sslcert"))
        );
        assert!(
            hint("received fatal alert: UnknownCA")
                .is_some_and(|h| h.contains("client certificate"))
        );
        assert!(hint("connection refused").is_none());
    }
}
