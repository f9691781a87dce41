//! libpq's environment variables: what a deployment sets once for every
//! PostgreSQL client of a host or container (`PGSSLMODE=verify-full`,
//! `PGSSLROOTCERT=/etc/ssl/db-ca.pem`, `PGHOST`, `PGUSER`...), and
//! tokio-postgres does not read. The store reads them as libpq does: each
//! stands for one setting of the connection string, used only when the
//! string does not give that setting (the URL wins).
//!
//! They are read through a lookup (a variable's value by its name), the
//! process's environment in the store, a map in the tests: no test
//! changes the environment other tests run in.

/// libpq's variables the store reads, each with the setting it stands
/// for. libpq's others are not read: `PGSERVICE` and `PGSERVICEFILE`,
/// `PGPASSFILE` (`~/.pgpass`), `PGSSLCRL`, `PGSSLCRLDIR`, `PGSSLPASSWORD`,
/// `PGREQUIRESSL`, `PGGSSENCMODE` and the other Kerberos and GSS ones,
/// `PGSSLMINPROTOCOLVERSION`, `PGSSLMAXPROTOCOLVERSION`,
/// `PGCLIENTENCODING`, `PGDATESTYLE`, `PGTZ`, `PGGEQO`.
pub(super) const VARIABLES: &[(&str, &str)] = &[
    ("PGHOST", "host"),
    ("PGHOSTADDR", "hostaddr"),
    ("PGPORT", "port"),
    ("PGDATABASE", "dbname"),
    ("PGUSER", "user"),
    ("PGPASSWORD", "password"),
    ("PGOPTIONS", "options"),
    ("PGAPPNAME", "application_name"),
    ("PGCONNECT_TIMEOUT", "connect_timeout"),
    ("PGTARGETSESSIONATTRS", "target_session_attrs"),
    ("PGCHANNELBINDING", "channel_binding"),
    ("PGLOADBALANCEHOSTS", "load_balance_hosts"),
    ("PGSSLNEGOTIATION", "sslnegotiation"),
    ("PGSSLMODE", "sslmode"),
    ("PGSSLROOTCERT", "sslrootcert"),
    ("PGSSLCERT", "sslcert"),
    ("PGSSLKEY", "sslkey"),
];

/// A variable's value, standing for a setting the connection string did
/// not give.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Default {
    /// The variable, for messages.
    pub(super) variable: &'static str,
    /// The setting it stands for.
    pub(super) key: &'static str,
    pub(super) value: String,
}

/// What `lookup` gives for each of [`VARIABLES`] whose setting `given`
/// says the connection string lacks, in [`VARIABLES`]' order. A variable
/// that is empty counts as unset.
pub(super) fn defaults(
    given: impl Fn(&str) -> bool,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Vec<Default> {
    VARIABLES
        .iter()
        .filter(|(_, key)| !given(key))
        .filter_map(|&(variable, key)| {
            let value = lookup(variable).filter(|value| !value.is_empty())?;
            Some(Default {
                variable,
                key,
                value,
            })
        })
        .collect()
}

/// The process's environment, as [`defaults`] looks a variable up; a
/// value that is not Unicode counts as unset.
pub(super) fn process(variable: &str) -> Option<String> {
    std::env::var(variable).ok()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use tokio_postgres::config::{Host, SslMode as WireMode};

    use super::super::link::{Link, link};
    #[cfg(feature = "postgres-tls")]
    use super::super::tls::Check;
    use super::*;
    use crate::Tls;

    /// A lookup over `vars` alone: the environment a test gives.
    fn environment(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        move |name| vars.get(name).cloned()
    }

    fn linked(url: &str, vars: &[(&str, &str)]) -> Link {
        link(url, &Tls::new(), &environment(vars)).unwrap_or_else(|e| panic!("{url}: {e}"))
    }

    fn refused(url: &str, configured: &Tls, vars: &[(&str, &str)]) -> String {
        match link(url, configured, &environment(vars)) {
            Ok(_) => panic!("{url} with {vars:?} is refused"),
            Err(error) => error.to_string(),
        }
    }

    /// What a deployment sets for every client of a host.
    const CONNECTION: &[(&str, &str)] = &[
        ("PGHOST", "env-host"),
        ("PGPORT", "6000"),
        ("PGUSER", "env-user"),
        ("PGPASSWORD", "env-password"),
        ("PGDATABASE", "env-db"),
        ("PGAPPNAME", "env-app"),
        ("PGCONNECT_TIMEOUT", "7"),
    ];

    // libpq's rule, setting by setting: a variable fills only what the
    // connection string leaves out, in either of its forms.
    #[test]
    fn a_variable_stands_for_its_setting_only_where_the_string_gives_none() {
        let everything = linked("postgres://", CONNECTION).config;
        assert_eq!(everything.get_hosts(), [Host::Tcp("env-host".to_owned())], "PGHOST");
        assert_eq!(everything.get_ports(), [6000], "PGPORT");
        assert_eq!(everything.get_user(), Some("env-user"), "PGUSER");
        assert_eq!(everything.get_password(), Some(&b"env-password"[..]), "PGPASSWORD");
        assert_eq!(everything.get_dbname(), Some("env-db"), "PGDATABASE");
        assert_eq!(everything.get_application_name(), Some("env-app"), "PGAPPNAME");
        assert_eq!(
            everything.get_connect_timeout(),
            Some(&Duration::from_secs(7)),
            "PGCONNECT_TIMEOUT"
        );
        for url in [
            "postgres://app@db:5433/app?application_name=mine&connect_timeout=2",
            "host=db port=5433 user=app dbname=app application_name=mine connect_timeout=2",
        ] {
            let config = linked(url, CONNECTION).config;
            assert_eq!(config.get_hosts(), [Host::Tcp("db".to_owned())], "{url}: its host");
            assert_eq!(config.get_ports(), [5433], "{url}: its port");
            assert_eq!(config.get_user(), Some("app"), "{url}: its user");
            assert_eq!(config.get_dbname(), Some("app"), "{url}: its database");
            assert_eq!(config.get_application_name(), Some("mine"), "{url}");
            assert_eq!(config.get_connect_timeout(), Some(&Duration::from_secs(2)), "{url}");
            assert_eq!(
                config.get_password(),
                Some(&b"env-password"[..]),
                "{url}: no password of its own, so PGPASSWORD's"
            );
        }
    }

    // A URL's host without a port takes PGPORT, as in libpq; once one of
    // its hosts names a port, the others take the default.
    #[test]
    fn pgport_is_every_hosts_port_unless_the_url_names_one() {
        let vars = [("PGPORT", "6000")];
        assert_eq!(linked("postgres://a,b/db", &vars).config.get_ports(), [6000]);
        assert_eq!(linked("host=a,b dbname=db", &vars).config.get_ports(), [6000]);
        assert_eq!(
            linked("postgres://a:5433,b/db", &vars).config.get_ports(),
            [5433, 5432]
        );
    }

    #[test]
    fn an_empty_variable_counts_as_unset() {
        let config = linked("postgres://u@h/db", &[("PGSSLMODE", ""), ("PGAPPNAME", "")]).config;
        assert_eq!(config.get_ssl_mode(), WireMode::Disable, "no mode: plain");
        assert_eq!(config.get_application_name(), None);
        assert!(
            defaults(|_| false, &environment(&[("PGUSER", "")])).is_empty(),
            "nothing to stand for"
        );
    }

    // The ones tokio-postgres would read in a form it does not know are
    // refused, naming the variable, rather than left unread.
    #[test]
    fn a_variable_with_a_value_the_store_refuses_is_named() {
        let why = refused("postgres://u@h/db", &Tls::new(), &[("PGSSLMODE", "strict")]);
        assert!(why.contains("sslmode=strict") && why.contains("PGSSLMODE"), "{why}");
        let why = refused(
            "postgres://u@h/db",
            &Tls::new(),
            &[("PGTARGETSESSIONATTRS", "prefer-standby")],
        );
        assert!(why.contains("PGTARGETSESSIONATTRS"), "{why}");
    }

    // A deployment's PGSSLMODE asks for TLS where the URL names no mode;
    // the URL's own mode wins.
    #[cfg(feature = "postgres-tls")]
    #[test]
    fn pgsslmode_asks_for_tls_where_the_url_names_no_mode() {
        let read = |url: &str, vars: &[(&str, &str)]| {
            let link = linked(url, vars);
            (link.config.get_ssl_mode(), link.check)
        };
        let require = [("PGSSLMODE", "require")];
        assert_eq!(read("postgres://u@h/db", &require), (WireMode::Require, Check::Unchecked));
        assert_eq!(read("host=h user=u", &require), (WireMode::Require, Check::Unchecked));
        assert_eq!(
            read("postgres://u@h/db?sslmode=disable", &require),
            (WireMode::Disable, Check::Plain),
            "the URL wins"
        );
        let public = [("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", "system")];
        assert_eq!(read("postgres://u@h/db", &public), (WireMode::Require, Check::Full));
        let why = refused("postgres://u@h/db", &Tls::new(), &[("PGSSLMODE", "verify-full")]);
        assert!(
            why.contains("verify-full needs the CA") && why.contains("PGSSLMODE"),
            "no CA to check against, and where the mode came from: {why}"
        );
    }

    // The certificates of the URL win over the configuration's, which win
    // over the environment's; the environment's are never read with
    // sslmode=disable (libpq uses none then), while the others are refused.
    #[cfg(feature = "postgres-tls")]
    #[test]
    fn the_environments_certificates_give_way_to_the_urls_and_the_configurations() {
        let vars = [
            ("PGSSLMODE", "verify-full"),
            ("PGSSLROOTCERT", "/nonexistent/env-ca.pem"),
        ];
        let why = refused("postgres://u@h/db", &Tls::new(), &vars);
        assert!(why.contains("/nonexistent/env-ca.pem"), "PGSSLROOTCERT's file is read: {why}");
        let configured = Tls::new().ca_file("/nonexistent/configured-ca.pem");
        let why = refused("postgres://u@h/db", &configured, &vars);
        assert!(why.contains("/nonexistent/configured-ca.pem"), "the configuration's: {why}");
        let why = refused(
            "postgres://u@h/db?sslrootcert=/nonexistent/url-ca.pem",
            &configured,
            &vars,
        );
        assert!(why.contains("/nonexistent/url-ca.pem"), "the URL's: {why}");
        let link = linked("postgres://u@h/db?sslmode=disable", &vars);
        assert_eq!(link.check, Check::Plain, "the environment's CA is left unused");
        let why = refused("postgres://u@h/db?sslmode=disable&sslrootcert=/ca.pem", &Tls::new(), &[]);
        assert!(why.contains("sslmode=disable"), "a CA given in the URL is refused: {why}");
        let why = refused("postgres://u@h/db", &Tls::new(), &[("PGSSLCERT", "/client.pem")]);
        assert!(
            why.contains("sslkey") && why.contains("PGSSLCERT"),
            "a certificate without its key, and where it came from: {why}"
        );
    }

    #[cfg(not(feature = "postgres-tls"))]
    #[test]
    fn pgsslmode_asking_for_tls_in_a_build_without_it_is_refused() {
        let why = refused("postgres://u@h/db", &Tls::new(), &[("PGSSLMODE", "require")]);
        assert!(why.contains("postgres-tls") && why.contains("PGSSLMODE"), "{why}");
    }

    #[test]
    fn the_variables_are_libpqs_names_for_settings_the_store_reads() {
        for (variable, key) in VARIABLES {
            assert!(variable.starts_with("PG"), "{variable}");
            assert!(
                crate::store::kit::conninfo::KEYWORDS.contains(key),
                "{variable} stands for {key}, a libpq keyword"
            );
        }
    }

    /// Set in the child process that [`in_a_child`] starts, so that the
    /// test it runs there knows it is the child.
    const CHILD: &str = "LOCK_CORE_TEST_PG_ENVIRONMENT";

    /// Runs the test `name` of this module again in a child process with
    /// `vars` as its only libpq variables, and checks that it passed: the
    /// environment of this process, which other tests share, is never
    /// changed (and `std::env::set_var` needs `unsafe`, which the crate
    /// forbids).
    fn in_a_child(name: &str, vars: &[(&str, &str)]) {
        let test = format!(
            "{}::{name}",
            module_path!().split_once("::").map_or("", |(_, path)| path)
        );
        let mut command =
            std::process::Command::new(std::env::current_exe().expect("the test binary"));
        command.args([&test, "--exact", "--nocapture", "--test-threads=1"]);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("PG") {
                command.env_remove(name);
            }
        }
        command.envs(vars.iter().copied()).env(CHILD, "1");
        let output = command.output().expect("the child runs");
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && said.contains("1 passed"),
            "the test in the child failed or did not run:\n{said}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// A CA file that does not exist.
    const MISSING: &str = "/nonexistent/lock-core-test/root.crt";

    // A deployment that sets TLS through libpq's variables (PGSSLMODE,
    // PGSSLROOTCERT) must get TLS, or a refusal saying why: never a plain
    // connection it did not ask for. A URL that names its own sslmode
    // wins, as in libpq. Run in a child process, whose environment really
    // holds the variables, so the store's own lookup is what is tested.
    #[test]
    fn pgsslmode_and_pgsslrootcert_in_the_environment_are_honoured_unless_the_url_says() {
        if std::env::var_os(CHILD).is_none() {
            return in_a_child(
                "pgsslmode_and_pgsslrootcert_in_the_environment_are_honoured_unless_the_url_says",
                &[("PGSSLMODE", "verify-full"), ("PGSSLROOTCERT", MISSING)],
            );
        }
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let connect = |url: &'static str| {
            let config =
                crate::PostgresConfig::new().timeout(std::time::Duration::from_millis(300));
            runtime.block_on(crate::PostgresStore::connect_with(url, config))
        };
        let error = connect("postgres://app@127.0.0.1:1/db").expect_err("no CA to read");
        let message = error.to_string();
        #[cfg(feature = "postgres-tls")]
        assert!(
            message.contains(MISSING) && message.contains("PGSSLROOTCERT"),
            "the CA PGSSLROOTCERT names is read, and the message says where it came from: {message}"
        );
        #[cfg(not(feature = "postgres-tls"))]
        assert!(
            message.contains("postgres-tls") && message.contains("PGSSLMODE"),
            "TLS asked for in a build without it is refused, naming the variable: {message}"
        );
        let error = connect("postgres://app@127.0.0.1:1/db?sslmode=disable")
            .expect_err("nothing listens on port 1");
        assert!(
            matches!(error, crate::Error::Store { .. }),
            "the URL's sslmode wins: a plain connection is tried, and refused: {error:?}"
        );
    }
}
