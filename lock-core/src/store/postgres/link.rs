//! Where and how the store connects: what a connection string, the
//! configuration's [`Tls`] and libpq's environment come to.
//!
//! Each setting is taken from the first of these that gives it, as libpq
//! takes it: the connection string (a `postgres://` URL or `key=value`
//! settings, read by [`conninfo`]); for the certificates, the
//! configuration's [`Tls`] (or `ConnectOptions::tls`); then libpq's
//! environment variables ([`environment`]). tokio-postgres is handed the
//! settings that result, written out again, so it reads exactly what was
//! read here.

use tokio_postgres::config::SslMode as WireMode;

use super::environment::{self, Default};
use super::tls::{Check, Connector, Roots, SslMode, connector, plan};
use super::conninfo;
use crate::store::kit::conninfo::Setting;
use crate::store::kit::{TLS_WORDS, Tls, invalid_url};
use crate::{Error, Result};

/// The store's name in [`Error::InvalidConfig`].
const STORE: &str = "postgres";

/// Where and how to connect.
#[derive(Clone)]
pub(super) struct Link {
    /// tokio-postgres's settings, the TLS words taken out.
    pub(super) config: tokio_postgres::Config,
    /// How the server's certificate is checked.
    pub(super) check: Check,
    /// The connector for the check and the certificates.
    pub(super) connector: Connector,
}

/// libpq's TLS words as one source (the connection string, or the
/// environment) gives them.
#[derive(Default)]
struct Words {
    mode: Option<SslMode>,
    /// `sslrootcert=system`: the public CAs.
    system: bool,
    /// The files named.
    tls: Tls,
}

impl Words {
    /// The words of `taken` (each `sslmode`, `sslrootcert`, `sslcert` or
    /// `sslkey` with its value); the last of each wins, as in libpq.
    fn of<'a>(taken: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<Words, String> {
        let mut words = Words::default();
        let mut files = Vec::new();
        let mut root = None;
        for (word, value) in taken {
            match word {
                "sslmode" => words.mode = Some(SslMode::parse(value)?),
                "sslrootcert" => root = Some(value),
                _ => files.push((word, value)),
            }
        }
        words.system = root == Some("system");
        if let Some(file) = root.filter(|root| *root != "system") {
            files.push(("sslrootcert", file));
        }
        words.tls = Tls::from_words(files)?;
        Ok(words)
    }
}

/// Reads `url` (a `postgres://` URL or a libpq `key=value` string) with
/// `configured` as the certificates the URL does not name, and `lookup`
/// (a variable's value by its name: the process's environment, or a map
/// in tests) for libpq's environment.
///
/// The errors: [`Error::InvalidUrl`] for a string that cannot be read
/// (shown redacted) or that tokio-postgres refuses;
/// [`Error::InvalidConfig`] for TLS settings that cannot work together or
/// files that cannot be used, naming the variables of the environment
/// that had a part.
pub(super) fn link(
    url: &str,
    configured: &Tls,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<Link> {
    let mut settings = conninfo::settings(url).map_err(|why| invalid_url(url, why))?;
    let mut words = vec!["sslmode"];
    words.extend(TLS_WORDS);
    let given = conninfo::take(&mut settings, &words);
    let defaults = environment::defaults(
        |key| given.iter().any(|(word, _)| word == key) || settings.get(key).is_some(),
        lookup,
    );
    let (from_environment, others): (Vec<&Default>, Vec<&Default>) = defaults
        .iter()
        .partition(|default| words.contains(&default.key));
    settings
        .0
        .extend(others.iter().map(|default| Setting::new(default.key, &default.value)));
    // The variables that had a part, named in every refusal.
    let read = |why: String| match defaults.len() {
        0 => why,
        _ => {
            let names: Vec<&str> = defaults.iter().map(|default| default.variable).collect();
            format!("{why} (libpq's environment gave {})", names.join(", "))
        }
    };
    let refused = |why: String| Error::invalid_config(STORE, read(why));
    let url_words = Words::of(
        given
            .iter()
            .map(|(word, value)| (word.as_str(), value.as_str())),
    )
    .map_err(refused)?;
    let environment_words = Words::of(
        from_environment
            .iter()
            .map(|default| (default.key, default.value.as_str())),
    )
    .map_err(refused)?;
    let mode = url_words.mode.or(environment_words.mode);
    // The connection string's certificates over the configuration's,
    // over the environment's; with `sslmode=disable`, the environment's
    // are left unused (libpq uses none then), while certificates given
    // anywhere else are refused.
    let explicit = configured.clone().overridden_by(url_words.tls.clone());
    let use_environment = mode != Some(SslMode::Disable);
    let mut tls = if use_environment {
        environment_words.tls.clone().overridden_by(explicit)
    } else {
        explicit
    };
    let system = url_words.system
        || (use_environment
            && environment_words.system
            && !url_words.tls.has_ca()
            && !configured.has_ca());
    if system {
        tls = tls.without_ca();
    }
    let roots = match (system, tls.has_ca()) {
        (true, _) => Roots::System,
        (false, true) => Roots::Given,
        (false, false) => Roots::None,
    };
    let (wire, check) = plan(mode, roots, tls.has_identity()).map_err(refused)?;
    // Without TLS in the build, `prefer` finds none to use and connects
    // plain, as libpq built without it does.
    #[cfg(not(feature = "postgres-tls"))]
    let check = if wire == WireMode::Prefer && check == Check::Unchecked {
        Check::Plain
    } else {
        check
    };
    let mut config = settings
        .to_client_string()
        .parse::<tokio_postgres::Config>()
        .map_err(|e| {
            // tokio-postgres keeps what it refused (`unknown option
            // `sslcrl``) in the error's source.
            let mut why = e.to_string();
            let mut cause = std::error::Error::source(&e);
            while let Some(next) = cause {
                why.push_str(&format!(": {next}"));
                cause = next.source();
            }
            invalid_url(
                url,
                read(format!(
                    "{why}; use a URL like postgres://user@127.0.0.1:5432/database?sslmode=verify-full"
                )),
            )
        })?;
    // Every `sslmode` was taken out above, so tokio-postgres must see its
    // default: one it read anyway would be overwritten by the plan.
    // Refused, never guessed.
    if config.get_ssl_mode() != WireMode::Prefer {
        return Err(invalid_url(
            url,
            "the connection string names sslmode in a way that could not be read (write sslmode=MODE, in the URL's query or as one key=value setting)",
        ));
    }
    if config.get_ssl_negotiation() == tokio_postgres::config::SslNegotiation::Direct
        && check == Check::Plain
    {
        return Err(refused("sslnegotiation=direct starts with TLS, and this connection asks for none: add sslmode=require or sslmode=verify-full".to_owned()));
    }
    config.ssl_mode(wire);
    let connector = connector(check, &tls).map_err(refused)?;
    Ok(Link {
        config,
        check,
        connector,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No variable set.
    pub(in crate::store::postgres) fn unset(_: &str) -> Option<String> {
        None
    }

    fn read(url: &str) -> std::result::Result<(WireMode, Check), String> {
        link(url, &Tls::new(), &unset)
            .map(|link| (link.config.get_ssl_mode(), link.check))
            .map_err(|error| error.to_string())
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
            &unset,
        )
        .expect("a URL tokio-postgres reads once the words are out");
        assert_eq!(link.config.get_application_name(), Some("locks"));
        assert_eq!(link.config.get_ssl_mode(), WireMode::Disable);
        let link = link_of("host=h user=u password='a  b'");
        assert_eq!(link.config.get_password(), Some(&b"a  b"[..]), "values kept as written");
    }

    fn link_of(url: &str) -> Link {
        link(url, &Tls::new(), &unset).unwrap_or_else(|why| panic!("{url}: {why}"))
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
