//! TLS for the PostgreSQL store, as libpq reads it: the URL's `sslmode`
//! (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`; `prefer`
//! when not given) and `sslrootcert`, `sslcert`, `sslkey` (or the
//! configuration's [`Tls`]), for the pool, the `LISTEN` connection and the
//! cancel requests alike.
//!
//! tokio-postgres knows only `disable`, `prefer` and `require`, and no
//! certificate files: the words are taken out of the URL here, the mode
//! handed on as the nearest of those three, and the checking of the
//! server's certificate set in the rustls configuration
//! (`tokio-postgres-rustls`) that every connection uses. Without the
//! `postgres-tls` feature connections are plain, and a mode or a
//! certificate that needs TLS is refused at connect.

use std::fmt;

use tokio_postgres::Socket;
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres::tls::MakeTlsConnect;

use super::conninfo;
use crate::store::kit::{TLS_WORDS, Tls};

#[cfg(feature = "postgres-tls")]
type Inner = tokio_postgres_rustls::MakeRustlsConnect;
#[cfg(not(feature = "postgres-tls"))]
type Inner = tokio_postgres::NoTls;

/// The connector of every connection the store opens: rustls with the
/// `postgres-tls` feature (its certificates read again when their files
/// change), plain TCP without.
#[derive(Clone)]
pub(super) struct Connector(
    #[cfg(feature = "postgres-tls")] std::sync::Arc<crate::store::kit::Reloading>,
    #[cfg(not(feature = "postgres-tls"))] Inner,
);

impl MakeTlsConnect<Socket> for Connector {
    type Stream = <Inner as MakeTlsConnect<Socket>>::Stream;
    type TlsConnect = <Inner as MakeTlsConnect<Socket>>::TlsConnect;
    type Error = <Inner as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        #[cfg(feature = "postgres-tls")]
        let inner = &mut tokio_postgres_rustls::MakeRustlsConnect::new((*self.0.config()).clone());
        #[cfg(not(feature = "postgres-tls"))]
        let inner = &mut self.0;
        <Inner as MakeTlsConnect<Socket>>::make_tls_connect(inner, domain)
    }
}

/// The stream a connection of [`Connector`] runs over.
pub(super) type Stream = <Connector as MakeTlsConnect<Socket>>::Stream;

/// libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum SslMode {
    /// Plain TCP only.
    Disable,
    /// TLS when the server offers it, its certificate unchecked; else
    /// plain. libpq's default.
    Prefer,
    /// TLS, its certificate unchecked (checked against the CA when
    /// `sslrootcert` is given, as libpq does).
    Require,
    /// TLS, the certificate signed by a trusted CA.
    VerifyCa,
    /// TLS, the certificate signed by a trusted CA and naming the host.
    VerifyFull,
}

impl SslMode {
    fn parse(word: &str) -> Result<SslMode, String> {
        Ok(match word {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            "allow" => {
                return Err(
                    "sslmode=allow (plain first, TLS on refusal) is not supported; use prefer or require"
                        .to_owned(),
                );
            }
            other => {
                return Err(format!(
                    "sslmode={other} is not one of disable, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }

    fn word(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// How a connection treats the server's certificate, once `sslmode` and
/// the certificates given are read together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Check {
    /// No TLS.
    Plain,
    /// TLS, the certificate unchecked.
    Unchecked,
    /// TLS, the certificate signed by the CA given.
    Chain,
    /// TLS, the certificate signed by a trusted CA and naming the host.
    Full,
}

/// Where the trusted CAs come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Roots {
    /// None given.
    None,
    /// `sslrootcert=PATH` or a [`Tls`] CA.
    Given,
    /// `sslrootcert=system`: the public CAs.
    System,
}

/// What tokio-postgres is told and how the certificate is checked, for
/// `mode` (`None`: the URL names none) with these certificates; or why
/// the combination is refused. libpq's rules, but for two: without a mode
/// and without certificates the connection is plain (libpq would try TLS
/// and take any certificate, no safer, and enabling the `postgres-tls`
/// feature must not change how existing URLs connect); and a check that
/// fails is an error, never a fallback to plain.
fn plan(mode: Option<SslMode>, roots: Roots, identity: bool) -> Result<(WireMode, Check), String> {
    let weak_with_system = |mode: SslMode| {
        format!("sslmode={mode} checks less than sslrootcert=system asks (the public CAs, and the host name): use sslmode=verify-full")
    };
    Ok(match mode {
        None => match roots {
            Roots::System => (WireMode::Require, Check::Full),
            Roots::Given => (WireMode::Require, Check::Chain),
            Roots::None if identity => (WireMode::Require, Check::Unchecked),
            Roots::None => (WireMode::Disable, Check::Plain),
        },
        Some(SslMode::Disable) => {
            if roots != Roots::None || identity {
                return Err("sslmode=disable, yet a CA or client certificate is given (sslrootcert, sslcert, sslkey or a Tls): drop them, or ask for TLS with sslmode=verify-full".to_owned());
            }
            (WireMode::Disable, Check::Plain)
        }
        Some(mode @ (SslMode::Prefer | SslMode::Require)) => {
            let wire = if mode == SslMode::Prefer {
                WireMode::Prefer
            } else {
                WireMode::Require
            };
            match roots {
                Roots::System => return Err(weak_with_system(mode)),
                // libpq checks the chain whenever it has a CA.
                Roots::Given => (wire, Check::Chain),
                Roots::None => (wire, Check::Unchecked),
            }
        }
        Some(SslMode::VerifyCa) => match roots {
            Roots::Given => (WireMode::Require, Check::Chain),
            Roots::System => return Err(weak_with_system(SslMode::VerifyCa)),
            Roots::None => {
                return Err("sslmode=verify-ca needs the CA to check against: give sslrootcert=PATH (or Tls::ca_file)".to_owned());
            }
        },
        Some(SslMode::VerifyFull) => match roots {
            Roots::Given | Roots::System => (WireMode::Require, Check::Full),
            Roots::None => {
                return Err("sslmode=verify-full needs the CA to check against: give sslrootcert=PATH (or Tls::ca_file), or sslrootcert=system for the public CAs".to_owned());
            }
        },
    })
}

/// Where and how to connect: what a URL and a [`Tls`] come to.
#[derive(Clone)]
pub(super) struct Link {
    /// tokio-postgres's settings, the TLS words taken out.
    pub(super) config: tokio_postgres::Config,
    /// How the server's certificate is checked.
    pub(super) check: Check,
    /// The connector for the check and the certificates.
    pub(super) connector: Connector,
}

/// Reads `url` (a `postgres://` URL or a libpq `key=value` string) with
/// `configured` as the certificates the URL's words do not name.
pub(super) fn link(url: &str, configured: &Tls) -> Result<Link, String> {
    let mut words = vec!["sslmode"];
    words.extend(TLS_WORDS);
    let (rest, taken) = conninfo::take(url, &words)?;
    let mut mode = None;
    let mut files = Vec::new();
    // The last `sslrootcert` wins, as in libpq: `system` or a file.
    let mut root = None;
    for (word, value) in &taken {
        match word.as_str() {
            "sslmode" => mode = Some(SslMode::parse(value)?),
            "sslrootcert" => root = Some(value.as_str()),
            _ => files.push((word.as_str(), value.as_str())),
        }
    }
    let system = root == Some("system");
    if let Some(file) = root.filter(|root| *root != "system") {
        files.push(("sslrootcert", file));
    }
    let mut tls = configured
        .clone()
        .overridden_by(Tls::from_words(files)?);
    if system {
        tls = tls.without_ca();
    }
    let roots = match (system, tls.has_ca()) {
        (true, _) => Roots::System,
        (false, true) => Roots::Given,
        (false, false) => Roots::None,
    };
    let (wire, check) = plan(mode, roots, tls.has_identity())?;
    // Without TLS in the build, `prefer` finds none to use and connects
    // plain, as libpq built without it does.
    #[cfg(not(feature = "postgres-tls"))]
    let check = if wire == WireMode::Prefer && check == Check::Unchecked {
        Check::Plain
    } else {
        check
    };
    let mut config = rest.parse::<tokio_postgres::Config>().map_err(|e| {
        format!("{e}; use a URL like postgres://user@127.0.0.1:5432/database?sslmode=verify-full")
    })?;
    // Every `sslmode` was taken out above, so tokio-postgres must see its
    // default: one it read anyway was written in a way not read here, and
    // would be overwritten by the plan. Refused, never guessed.
    if config.get_ssl_mode() != WireMode::Prefer {
        return Err("the connection string names sslmode in a way that could not be read (write sslmode=MODE, in the URL's query or as one key=value setting)".to_owned());
    }
    if config.get_ssl_negotiation() == tokio_postgres::config::SslNegotiation::Direct
        && check == Check::Plain
    {
        return Err("sslnegotiation=direct starts with TLS, and this connection asks for none: add sslmode=require or sslmode=verify-full".to_owned());
    }
    config.ssl_mode(wire);
    let connector = connector(check, &tls)?;
    Ok(Link {
        config,
        check,
        connector,
    })
}

#[cfg(feature = "postgres-tls")]
fn connector(check: Check, tls: &Tls) -> Result<Connector, String> {
    use crate::store::kit::{Verify, client_config};
    let verify = match check {
        Check::Full => Verify::Full,
        Check::Chain => Verify::Chain,
        Check::Plain | Check::Unchecked => Verify::Nothing,
    };
    let reloading = crate::store::kit::Reloading::new(tls.clone(), move |tls| {
        let mut config = client_config(tls, verify)?;
        // As libpq 17 does: what PostgreSQL's direct TLS negotiation
        // (`sslnegotiation=direct`) requires, and other servers ignore.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(config)
    })?;
    Ok(Connector(std::sync::Arc::new(reloading)))
}

#[cfg(not(feature = "postgres-tls"))]
fn connector(check: Check, _: &Tls) -> Result<Connector, String> {
    match check {
        Check::Plain => Ok(Connector(tokio_postgres::NoTls)),
        _ => Err(
            "TLS is asked for (an sslmode that needs it, or a CA or client certificate), and this build has none: enable lock-core's `postgres-tls` feature"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(url: &str) -> Result<(WireMode, Check), String> {
        link(url, &Tls::new()).map(|link| (link.config.get_ssl_mode(), link.check))
    }

    // libpq's table, as `plan` reads it; `None` for a refusal.
    #[test]
    fn each_mode_and_certificate_comes_to_libpqs_check() {
        use Check::*;
        let given = Roots::Given;
        let cases = [
            (None, Roots::None, false, Some((WireMode::Disable, Plain))),
            (None, given, false, Some((WireMode::Require, Chain))),
            (None, Roots::System, false, Some((WireMode::Require, Full))),
            (None, Roots::None, true, Some((WireMode::Require, Unchecked))),
            (Some(SslMode::Disable), Roots::None, false, Some((WireMode::Disable, Plain))),
            (Some(SslMode::Disable), given, false, None),
            (Some(SslMode::Disable), Roots::None, true, None),
            (Some(SslMode::Prefer), Roots::None, false, Some((WireMode::Prefer, Unchecked))),
            (Some(SslMode::Prefer), given, false, Some((WireMode::Prefer, Chain))),
            (Some(SslMode::Prefer), Roots::System, false, None),
            (Some(SslMode::Require), Roots::None, false, Some((WireMode::Require, Unchecked))),
            (Some(SslMode::Require), given, false, Some((WireMode::Require, Chain))),
            (Some(SslMode::Require), Roots::System, false, None),
            (Some(SslMode::VerifyCa), Roots::None, false, None),
            (Some(SslMode::VerifyCa), given, false, Some((WireMode::Require, Chain))),
            (Some(SslMode::VerifyCa), Roots::System, false, None),
            (Some(SslMode::VerifyFull), Roots::None, false, None),
            (Some(SslMode::VerifyFull), given, false, Some((WireMode::Require, Full))),
            (Some(SslMode::VerifyFull), Roots::System, false, Some((WireMode::Require, Full))),
        ];
        for (mode, roots, identity, wanted) in cases {
            assert_eq!(
                plan(mode, roots, identity).ok(),
                wanted,
                "{mode:?} {roots:?} identity={identity}"
            );
        }
        let why = plan(Some(SslMode::VerifyFull), Roots::None, false).expect_err("no CA");
        assert!(why.contains("sslrootcert=system"), "{why}");
    }

    #[test]
    fn without_sslmode_or_certificates_a_connection_is_plain() {
        assert_eq!(read("postgres://u@h/db"), Ok((WireMode::Disable, Check::Plain)));
        assert_eq!(read("host=h user=u"), Ok((WireMode::Disable, Check::Plain)));
    }

    // libpq takes the last `sslrootcert`: a file after `system` is the CA.
    #[cfg(feature = "postgres-tls")]
    #[test]
    fn the_last_sslrootcert_wins() {
        let why = read(
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=system&sslrootcert=/nonexistent/ca.pem",
        )
        .expect_err("the file is the CA, and it is missing");
        assert!(why.contains("/nonexistent/ca.pem"), "{why}");
    }

    #[test]
    fn direct_negotiation_without_tls_is_refused() {
        for url in [
            "postgres://u@h/db?sslnegotiation=direct",
            "host=h sslnegotiation=direct sslmode=disable",
        ] {
            let why = read(url).expect_err(url);
            assert!(why.contains("sslnegotiation=direct"), "{url}: {why}");
        }
    }

    #[test]
    fn an_unknown_mode_is_refused_naming_the_known_ones() {
        for bad in ["postgres://u@h/db?sslmode=strict", "postgres://u@h/db?sslmode=allow"] {
            let why = read(bad).expect_err(bad);
            assert!(why.contains("sslmode="), "{bad}: {why}");
        }
    }

    #[test]
    fn the_words_tokio_postgres_does_not_know_are_taken_out() {
        let link = link(
            "postgres://u@h:5433/db?application_name=locks&sslmode=disable",
            &Tls::new(),
        )
        .expect("a URL tokio-postgres reads once the words are out");
        assert_eq!(link.config.get_application_name(), Some("locks"));
        assert_eq!(link.config.get_ssl_mode(), WireMode::Disable);
        let link = link_of("host=h user=u password='a  b'");
        assert_eq!(link.config.get_password(), Some(&b"a  b"[..]), "values kept as written");
    }

    fn link_of(url: &str) -> Link {
        link(url, &Tls::new()).unwrap_or_else(|why| panic!("{url}: {why}"))
    }

    // A mode that asks for TLS is never lost to the way it is written.
    #[cfg(feature = "postgres-tls")]
    #[test]
    fn a_mode_however_written_is_the_one_used() {
        for url in [
            "host=h user=u sslmode = require",
            "host=h application_name=svc://x sslmode=require",
            "postgres://u@h/db?sslmode=require",
        ] {
            assert_eq!(read(url), Ok((WireMode::Require, Check::Unchecked)), "{url}");
        }
    }

    #[cfg(feature = "postgres-tls")]
    #[test]
    fn a_ca_is_read_when_connecting_is_set_up_and_named_when_missing() {
        let why = read("postgres://u@h/db?sslmode=require&sslrootcert=/nonexistent/ca.pem")
            .expect_err("the CA is read when connecting is set up");
        assert!(why.contains("/nonexistent/ca.pem"), "{why}");
        assert_eq!(
            read("postgres://u@h/db?sslmode=verify-full&sslrootcert=system"),
            Ok((WireMode::Require, Check::Full)),
            "the public CAs"
        );
    }

    #[cfg(not(feature = "postgres-tls"))]
    #[test]
    fn a_mode_that_needs_tls_is_refused_without_the_feature() {
        for url in [
            "postgres://u@h/db?sslmode=require",
            "host=h user=u sslmode = require",
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=system",
            "postgres://u@h/db?sslrootcert=/ca.pem",
        ] {
            let why = read(url).expect_err(url);
            assert!(why.contains("postgres-tls"), "{url}: {why}");
        }
        assert_eq!(
            read("postgres://u@h/db?sslmode=prefer"),
            Ok((WireMode::Prefer, Check::Plain)),
            "prefer finds no TLS to use, and connects plain"
        );
    }
}
