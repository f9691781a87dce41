//! TLS for the PostgreSQL store, as libpq reads it: the URL's `sslmode`
//! (`disable`, `prefer`, `require`, `verify-ca`, `verify-full`; `prefer`
//! when not given) and `sslrootcert`, `sslcert`, `sslkey` (or the
//! configuration's [`Tls`]), for the pool, the `LISTEN` connection and the
//! cancel requests alike.
//!
//! tokio-postgres knows only `disable`, `prefer` and `require`, and no
//! certificate files: the words are taken out of the connection string
//! (or come from libpq's environment) in [`link`](super::link), the mode
//! is handed on as the nearest of those three ([`plan`]), and the checking
//! of the server's certificate set in the rustls configuration
//! (`tokio-postgres-rustls`) that every connection uses ([`connector`]).
//! Without the `postgres-tls` feature connections are plain, and a mode or
//! a certificate that needs TLS is refused at connect.

use std::fmt;

use tokio_postgres::Socket;
use tokio_postgres::config::SslMode as WireMode;
use tokio_postgres::tls::MakeTlsConnect;

use crate::store::kit::Tls;

#[cfg(feature = "postgres-tls")]
type Inner = tokio_postgres_rustls::MakeRustlsConnect;
#[cfg(not(feature = "postgres-tls"))]
type Inner = tokio_postgres::NoTls;

/// The connector of every connection the store opens: rustls with the
/// `postgres-tls` feature (its certificates read again when their files
/// change), plain TCP without.
#[derive(Clone)]
pub(super) struct Connector {
    #[cfg(feature = "postgres-tls")]
    tls: std::sync::Arc<crate::store::kit::Reloading>,
    #[cfg(not(feature = "postgres-tls"))]
    tls: Inner,
    /// The link asks for no TLS ([`Check::Plain`]).
    plain: bool,
}

impl MakeTlsConnect<Socket> for Connector {
    type Stream = <Inner as MakeTlsConnect<Socket>>::Stream;
    type TlsConnect = <Inner as MakeTlsConnect<Socket>>::TlsConnect;
    type Error = <Inner as MakeTlsConnect<Socket>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Self::TlsConnect, Self::Error> {
        #[cfg(feature = "postgres-tls")]
        let inner = &mut tokio_postgres_rustls::MakeRustlsConnect::new((*self.tls.config()).clone());
        #[cfg(not(feature = "postgres-tls"))]
        let inner = &mut self.tls;
        <Inner as MakeTlsConnect<Socket>>::make_tls_connect(inner, domain)
    }
}

impl Connector {
    /// Sends the cancel request of `token`, connecting as this connector's
    /// link says.
    ///
    /// The request goes where the connection it cancels went, with that
    /// connection's `sslmode`: with [`from_pool`](super::PostgresStore::from_pool),
    /// the application's, whatever the listen URL says. A link that asks
    /// for no TLS sends it plain, or not at all when that connection's mode
    /// needs TLS (`require`): never over TLS that takes any certificate,
    /// which would hand the connection's cancel key to whoever answers.
    pub(super) async fn cancel(
        &self,
        token: &tokio_postgres::CancelToken,
    ) -> Result<(), tokio_postgres::Error> {
        if self.plain {
            token.cancel_query(tokio_postgres::NoTls).await
        } else {
            token.cancel_query(self.clone()).await
        }
    }

    /// Whether the link asks for no TLS.
    pub(super) fn is_plain(&self) -> bool {
        self.plain
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
    pub(super) fn parse(word: &str) -> Result<SslMode, String> {
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
pub(super) enum Roots {
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
pub(super) fn plan(mode: Option<SslMode>, roots: Roots, identity: bool) -> Result<(WireMode, Check), String> {
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

/// The connector for `check` with the certificates of `tls`.
#[cfg(feature = "postgres-tls")]
pub(super) fn connector(check: Check, tls: &Tls) -> Result<Connector, String> {
    use crate::store::kit::{Verify, client_config};
    let verify = match check {
        // A plain link makes no TLS connection (`Connector::cancel`); were
        // one ever asked of it, it would check everything, never nothing.
        Check::Full | Check::Plain => Verify::Full,
        Check::Chain => Verify::Chain,
        Check::Unchecked => Verify::Nothing,
    };
    let reloading = crate::store::kit::Reloading::new(tls.clone(), move |tls| {
        let mut config = client_config(tls, verify)?;
        // As libpq 17 does: what PostgreSQL's direct TLS negotiation
        // (`sslnegotiation=direct`) requires, and other servers ignore.
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        Ok(config)
    })?;
    Ok(Connector {
        tls: std::sync::Arc::new(reloading),
        plain: check == Check::Plain,
    })
}

/// The connector for `check`: plain only, in a build without TLS.
#[cfg(not(feature = "postgres-tls"))]
pub(super) fn connector(check: Check, _: &Tls) -> Result<Connector, String> {
    match check {
        Check::Plain => Ok(Connector {
            tls: tokio_postgres::NoTls,
            plain: true,
        }),
        _ => Err(
            "TLS is asked for (an sslmode that needs it, or a CA or client certificate), and this build has none: enable lock-core's `postgres-tls` feature"
                .to_owned(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
