//! A PostgreSQL connection string, in either of libpq's forms (a
//! `postgres://` or `postgresql://` URL, or `key=value` settings), read
//! into libpq's settings with the kit's readers, the ones
//! [`redacted`](crate::store::kit::redacted) shows a URL with: the one
//! list the store takes its TLS words out of, fills from libpq's
//! environment, and hands to tokio-postgres.
//!
//! A URL comes to settings as libpq turns one into them: its user,
//! password, hosts and ports (`host=a,b port=5433,`), database (`dbname`)
//! and query settings, in that order.

use crate::store::kit::conninfo::{Setting, Settings};
use crate::store::kit::redact::check_libpq_query;
use crate::store::kit::{StoreUrl, percent_decode, scheme};

/// The settings `text` gives, or why it gives none (never quoting it).
pub(super) fn settings(text: &str) -> Result<Settings, String> {
    match scheme(text) {
        Some((scheme, _)) if scheme == "postgres" || scheme == "postgresql" => {
            let url = StoreUrl::parse(text)?;
            check_libpq_query(&url)?;
            from_url(&url)
        }
        Some((scheme, _)) => Err(format!(
            "`{scheme}://` is no PostgreSQL URL; write postgres://user@host:5432/database, or key=value settings"
        )),
        None => Settings::parse(text),
    }
}

/// A URL's settings, as libpq reads them from it.
fn from_url(url: &StoreUrl) -> Result<Settings, String> {
    if url.fragment().is_some() {
        return Err(
            "a postgres:// URL has no `#` part: write a `#` in a password or a database name as %23"
                .to_owned(),
        );
    }
    let mut settings = Vec::new();
    if let Some(user) = url.user() {
        settings.push(Setting::new("user", user));
    }
    if let Some(password) = url.password() {
        settings.push(Setting::new("password", password));
    }
    if !url.hosts().is_empty() {
        // A host may be a socket directory, escaped: `%2Fvar%2Frun%2Fpostgresql`.
        let hosts = url
            .hosts()
            .iter()
            .map(|host| percent_decode(host.bare()))
            .collect::<Result<Vec<_>, _>>()?;
        settings.push(Setting::new("host", hosts.join(",")));
        // Only when some host names its port: otherwise `PGPORT`, or the
        // default, is every host's, as in libpq.
        if url.hosts().iter().any(|host| host.port().is_some()) {
            let ports: Vec<String> = url
                .hosts()
                .iter()
                .map(|host| host.port().map(|port| port.to_string()).unwrap_or_default())
                .collect();
            settings.push(Setting::new("port", ports.join(",")));
        }
    }
    if let Some(database) = url.path().filter(|path| !path.is_empty()) {
        settings.push(Setting::new("dbname", database));
    }
    for (key, value) in url.query() {
        settings.push(Setting::new(key, value));
    }
    Ok(Settings(settings))
}

/// Takes every setting named one of `keys` out of `settings`, and returns
/// them in order.
pub(super) fn take(settings: &mut Settings, keys: &[&str]) -> Vec<(String, String)> {
    let (taken, kept): (Vec<Setting>, Vec<Setting>) = std::mem::take(&mut settings.0)
        .into_iter()
        .partition(|setting| keys.contains(&setting.key.as_str()));
    settings.0 = kept;
    taken
        .into_iter()
        .map(|setting| (setting.key, setting.value))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<(String, String)> {
        settings(text)
            .unwrap_or_else(|why| panic!("{text}: {why}"))
            .0
            .into_iter()
            .map(|setting| (setting.key, setting.value))
            .collect()
    }

    fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(key, value)| ((*key).to_owned(), (*value).to_owned()))
            .collect()
    }

    // A URL comes to the settings libpq makes of it, so that one list is
    // what the TLS words are taken from and the environment fills.
    #[test]
    fn a_url_comes_to_libpqs_settings() {
        assert_eq!(
            read("postgres://app:p%40ss?w,rd@db1:5433,[::1]/app?sslmode=require&application_name=x"),
            pairs(&[
                ("user", "app"),
                ("password", "p@ss?w,rd"),
                ("host", "db1,::1"),
                ("port", "5433,"),
                ("dbname", "app"),
                ("sslmode", "require"),
                ("application_name", "x"),
            ])
        );
        assert_eq!(
            read("postgresql://%2Fvar%2Frun%2Fpostgresql/app"),
            pairs(&[("host", "/var/run/postgresql"), ("dbname", "app")]),
            "a socket directory, escaped"
        );
        assert_eq!(read("postgres://"), pairs(&[]), "nothing: libpq's defaults");
    }

    // tokio-postgres reads what it is handed as the settings read here: a
    // password, however written, is the one the store sends.
    #[test]
    fn tokio_postgres_reads_the_settings_as_they_were_read_here() {
        for text in [
            "postgres://app:p@ss?w,rd:x@db:5433/app",
            "host=db port=5433 user=app password = 'p@ss w\\'rd' dbname=app",
            "host=db user=app password=p\\ ss",
        ] {
            let settings = settings(text).expect(text);
            let config: tokio_postgres::Config = settings
                .to_client_string()
                .parse()
                .unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(
                config.get_password(),
                settings.get("password").map(str::as_bytes),
                "{text}"
            );
            assert_eq!(config.get_user(), Some("app"), "{text}");
        }
    }

    #[test]
    fn the_tls_words_are_taken_out_and_the_rest_stays_in_order() {
        let mut settings = settings("host=h sslmode = require user=u sslrootcert='/my ca.pem'")
            .expect("settings");
        let taken = take(&mut settings, &["sslmode", "sslrootcert"]);
        assert_eq!(
            taken,
            pairs(&[("sslmode", "require"), ("sslrootcert", "/my ca.pem")])
        );
        assert_eq!(settings.to_client_string(), "host=h user=u");
    }

    #[test]
    fn a_url_of_another_store_or_with_a_fragment_is_refused() {
        assert!(settings("redis://h").is_err());
        let why = settings("postgres://u:pw@h/db#x").expect_err("a fragment");
        assert!(why.contains("%23"), "{why}");
    }
}
