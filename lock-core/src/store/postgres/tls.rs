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

use crate::store::kit::{TLS_WORDS, Tls, take_words};

#[cfg(feature = "postgres-tls")]
type Inner = tokio_postgres_rustls::MakeRustlsConnect;
#[cfg(not(feature = "postgres-tls"))]
type Inner = tokio_postgres::NoTls;

/// The connector of every connection the store opens: rustls with the
/// `postgres-tls` feature, plain TCP without.
#[derive(Clone)]
pub(super) struct Connector(Inner);

impl MakeTlsConnect<Socket> for Connector {
    type Stream = <Inner as MakeTlsConnect<Socket>>::Stream;
    type TlsConnect = <Inner as MakeTlsConnect<Socket>>::TlsConnect;
    type Error = <Inner as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        <Inner as MakeTlsConnect<Socket>>::make_tls_connect(&mut self.0, domain)
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

/// Where and how to connect: what a URL and a [`Tls`] come to.
#[derive(Clone)]
pub(super) struct Link {
    /// tokio-postgres's settings, the TLS words taken out.
    pub(super) config: tokio_postgres::Config,
    /// The mode, as libpq reads it.
    pub(super) mode: SslMode,
    /// The connector for the mode and the certificates.
    pub(super) connector: Connector,
}

/// Reads `url` (a `postgres://` URL or a libpq `key=value` string) with
/// `configured` as the certificates the URL's words do not name.
pub(super) fn link(url: &str, configured: &Tls) -> Result<Link, String> {
    let mut words = vec!["sslmode"];
    words.extend(TLS_WORDS);
    let (rest, taken) = take_words(url, &words)?;
    let mut mode = SslMode::Prefer;
    for (word, value) in &taken {
        if word == "sslmode" {
            mode = SslMode::parse(value)?;
        }
    }
    let tls = configured.clone().overridden_by(Tls::from_words(
        taken
            .iter()
            .filter(|(word, _)| word != "sslmode")
            .map(|(word, value)| (word.as_str(), value.as_str())),
    )?);
    // libpq: `require` with a CA file checks the chain, as `verify-ca`.
    if mode == SslMode::Require && tls.has_ca() {
        mode = SslMode::VerifyCa;
    }
    let mut config = rest.parse::<tokio_postgres::Config>().map_err(|e| {
        format!("{e}; use a URL like postgres://user@127.0.0.1:5432/database?sslmode=verify-full")
    })?;
    config.ssl_mode(match mode {
        SslMode::Disable => WireMode::Disable,
        SslMode::Prefer => WireMode::Prefer,
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => WireMode::Require,
    });
    let connector = connector(mode, &tls)?;
    Ok(Link {
        config,
        mode,
        connector,
    })
}

#[cfg(feature = "postgres-tls")]
fn connector(mode: SslMode, tls: &Tls) -> Result<Connector, String> {
    use crate::store::kit::{Verify, client_config};
    let verify = match mode {
        SslMode::VerifyFull => Verify::Full,
        SslMode::VerifyCa => Verify::Chain,
        SslMode::Disable | SslMode::Prefer | SslMode::Require => Verify::Nothing,
    };
    Ok(Connector(tokio_postgres_rustls::MakeRustlsConnect::new(
        client_config(tls, verify)?,
    )))
}

#[cfg(not(feature = "postgres-tls"))]
fn connector(mode: SslMode, tls: &Tls) -> Result<Connector, String> {
    match mode {
        SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Err(format!(
            "sslmode={mode} needs TLS, and this build has none: enable lock-core's `postgres-tls` feature"
        )),
        _ if !tls.is_empty() => Err(
            "a CA or client certificate (sslrootcert, sslcert, sslkey or PostgresConfig::tls) needs TLS, and this build has none: enable lock-core's `postgres-tls` feature"
                .to_owned(),
        ),
        SslMode::Disable | SslMode::Prefer => Ok(Connector(tokio_postgres::NoTls)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_comes_from_the_url_and_prefer_is_the_default() {
        let read = |url: &str| link(url, &Tls::new()).map(|link| link.mode);
        assert_eq!(read("postgres://u@h/db"), Ok(SslMode::Prefer));
        assert_eq!(read("postgres://u@h/db?sslmode=disable"), Ok(SslMode::Disable));
        assert_eq!(read("host=h user=u sslmode=disable"), Ok(SslMode::Disable));
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
    }

    #[cfg(feature = "postgres-tls")]
    #[test]
    fn require_with_a_ca_checks_the_chain_as_libpq_does() {
        // The file need not exist to read the mode... but the CA is read
        // to build the configuration, so a missing one is an error that
        // names it.
        let why = link("postgres://u@h/db?sslmode=require&sslrootcert=/nonexistent/ca.pem", &Tls::new())
            .err()
            .expect("the CA is read when connecting is set up");
        assert!(why.contains("/nonexistent/ca.pem"), "{why}");
        assert_eq!(
            link("postgres://u@h/db?sslmode=require", &Tls::new()).map(|l| l.mode).ok(),
            Some(SslMode::Require)
        );
    }

    #[cfg(not(feature = "postgres-tls"))]
    #[test]
    fn a_mode_that_needs_tls_is_refused_without_the_feature() {
        for url in [
            "postgres://u@h/db?sslmode=require",
            "postgres://u@h/db?sslmode=verify-full",
            "postgres://u@h/db?sslrootcert=/ca.pem",
        ] {
            let why = link(url, &Tls::new()).err().expect(url);
            assert!(why.contains("postgres-tls"), "{url}: {why}");
        }
    }
}
