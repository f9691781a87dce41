//! libpq's `key=value` connection strings, read as libpq and tokio-postgres
//! read them: any Unicode blank between settings (a pasted non-breaking
//! space included), blanks around `=`, values in single quotes holding
//! blanks, and `\` escaping the next character, quoted or not.
//!
//! The PostgreSQL store reads its connection strings with this, and
//! [`redacted`](super::redacted) shows them with it, so a password is
//! hidden exactly as far as the store reads it.

use std::fmt;

use super::url::{HIDDEN, is_secret};

/// Every keyword libpq's connection strings take (libpq 18's, and
/// tokio-postgres's `keepalives_retries`). libpq refuses any other ("invalid
/// connection option"), and so does this reader: a string with another
/// word in a key's place (a blank left unquoted in a password, say) is not
/// a connection string, and is neither read nor shown.
pub(crate) const KEYWORDS: &[&str] = &[
    "application_name",
    "channel_binding",
    "client_encoding",
    "connect_timeout",
    "dbname",
    "fallback_application_name",
    "gssdelegation",
    "gssencmode",
    "gsslib",
    "host",
    "hostaddr",
    "keepalives",
    "keepalives_count",
    "keepalives_idle",
    "keepalives_interval",
    "keepalives_retries",
    "krbsrvname",
    "load_balance_hosts",
    "max_protocol_version",
    "min_protocol_version",
    "oauth_client_id",
    "oauth_client_secret",
    "oauth_issuer",
    "oauth_scope",
    "options",
    "passfile",
    "password",
    "port",
    "replication",
    "require_auth",
    "requirepeer",
    "scram_client_key",
    "scram_server_key",
    "service",
    "ssl_max_protocol_version",
    "ssl_min_protocol_version",
    "sslcert",
    "sslcertmode",
    "sslcompression",
    "sslcrl",
    "sslcrldir",
    "sslkey",
    "sslkeylogfile",
    "sslmode",
    "sslnegotiation",
    "sslpassword",
    "sslrootcert",
    "sslsni",
    "target_session_attrs",
    "tcp_user_timeout",
    "user",
];

/// Checks that `key`, the `number`th setting's, is one of [`KEYWORDS`],
/// without quoting it.
pub(crate) fn check_keyword(key: &str, number: usize) -> Result<(), String> {
    if KEYWORDS.contains(&key) {
        Ok(())
    } else {
        Err(format!(
            "the connection string's setting number {number} is no setting libpq knows (put a value with blanks in single quotes)"
        ))
    }
}

/// One `key = value` of a connection string (no `Debug`: its value may be
/// a password).
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Setting {
    pub(crate) key: String,
    pub(crate) value: String,
    /// The value as written, quotes and escapes included.
    pub(crate) written: String,
}

impl Setting {
    /// A setting given by its value, written as [`Settings`] writes one.
    pub(crate) fn new(key: impl Into<String>, value: impl Into<String>) -> Setting {
        let value = value.into();
        Setting {
            key: key.into(),
            written: quoted(&value),
            value,
        }
    }
}

/// The settings of a connection string, in order.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Settings(pub(crate) Vec<Setting>);

impl Settings {
    /// Reads `text`. The error says what is wrong and where (which
    /// setting, counted from 1), never quoting the text: a string that
    /// cannot be read may hold a password anywhere in it.
    pub(crate) fn parse(text: &str) -> Result<Settings, String> {
        let mut chars = text.char_indices().peekable();
        let at = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
            chars.peek().map_or(text.len(), |(at, _)| *at)
        };
        let skip_blanks = |chars: &mut std::iter::Peekable<std::str::CharIndices<'_>>| {
            while chars.next_if(|(_, c)| c.is_whitespace()).is_some() {}
        };
        let mut found = Vec::new();
        loop {
            skip_blanks(&mut chars);
            if chars.peek().is_none() {
                return Ok(Settings(found));
            }
            let number = found.len() + 1;
            let start = at(&mut chars);
            while chars
                .next_if(|(_, c)| *c != '=' && !c.is_whitespace())
                .is_some()
            {}
            let key = text[start..at(&mut chars)].to_owned();
            skip_blanks(&mut chars);
            if chars.next_if(|(_, c)| *c == '=').is_none() {
                return Err(format!(
                    "the connection string's setting number {number} has no `=`; write key=value settings (a value with blanks in single quotes), or a postgres:// URL"
                ));
            }
            if key.is_empty() {
                return Err(format!(
                    "the connection string's setting number {number} has an `=` with no key before it; write key=value settings"
                ));
            }
            check_keyword(&key, number)?;
            skip_blanks(&mut chars);
            let value_start = at(&mut chars);
            let mut value = String::new();
            let unclosed = || {
                format!(
                    "the value of the connection string's setting number {number} opens a quote it never closes"
                )
            };
            if chars.next_if(|(_, c)| *c == '\'').is_some() {
                loop {
                    match chars.next() {
                        None => return Err(unclosed()),
                        Some((_, '\'')) => break,
                        Some((_, '\\')) => match chars.next() {
                            Some((_, escaped)) => value.push(escaped),
                            None => return Err(unclosed()),
                        },
                        Some((_, c)) => value.push(c),
                    }
                }
            } else {
                if chars.peek().is_none() {
                    return Err(format!(
                        "the connection string's setting number {number} ends at its `=`; write an empty value as ''"
                    ));
                }
                while let Some((_, c)) = chars.next_if(|(_, c)| !c.is_whitespace()) {
                    if c == '\\' {
                        if let Some((_, escaped)) = chars.next() {
                            value.push(escaped);
                        }
                    } else {
                        value.push(c);
                    }
                }
            }
            found.push(Setting {
                key,
                value,
                written: text[value_start..at(&mut chars)].to_owned(),
            });
        }
    }

    /// The value of the last setting `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|setting| setting.key == key)
            .map(|setting| setting.value.as_str())
    }

    /// Every form of every secret: as read, and as written.
    pub(super) fn secrets(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|setting| is_secret(&setting.key))
            .flat_map(|setting| [setting.value.clone(), setting.written.clone()])
            .collect()
    }

    /// The settings as a connection string for a client library to read,
    /// every value quoted where it needs to be: never show it.
    pub(crate) fn to_client_string(&self) -> String {
        self.written(false)
    }

    fn written(&self, hide: bool) -> String {
        let settings: Vec<String> = self
            .0
            .iter()
            .map(|setting| {
                if hide && is_secret(&setting.key) {
                    format!("{}={HIDDEN}", setting.key)
                } else {
                    format!("{}={}", setting.key, quoted(&setting.value))
                }
            })
            .collect();
        settings.join(" ")
    }
}

/// Shown with `***` for every password.
impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written(true))
    }
}

/// As `Display`: never a password.
impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Settings({self})")
    }
}

/// `value` as libpq reads it back: in single quotes, with `\` before each
/// `'` and `\`, when it is empty or holds a blank, a quote or a `\`.
fn quoted(value: &str) -> String {
    let plain = !value.is_empty()
        && !value
            .chars()
            .any(|c| c.is_whitespace() || c == '\'' || c == '\\');
    if plain {
        value.to_owned()
    } else {
        format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> Vec<(String, String)> {
        Settings::parse(text)
            .unwrap_or_else(|why| panic!("{text:?}: {why}"))
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

    // libpq's own forms: each must read as libpq reads it, or a setting
    // (a TLS mode, a password) is lost or misplaced.
    #[test]
    fn blanks_around_the_equals_sign_quotes_and_escapes_read_as_libpq_reads_them() {
        assert_eq!(
            read("host=h user = u sslmode= require sslrootcert ='/etc/my ca.pem'"),
            pairs(&[
                ("host", "h"),
                ("user", "u"),
                ("sslmode", "require"),
                ("sslrootcert", "/etc/my ca.pem")
            ])
        );
        assert_eq!(
            read("password='it\\'s a \\\\ b' user=u"),
            pairs(&[("password", "it's a \\ b"), ("user", "u")])
        );
        assert_eq!(
            read("password=a\\ b host=h"),
            pairs(&[("password", "a b"), ("host", "h")]),
            "a `\\` escapes a blank outside quotes too"
        );
        assert_eq!(
            read("application_name=svc://x sslmode=require"),
            pairs(&[("application_name", "svc://x"), ("sslmode", "require")]),
            "a value holding a URL is still a value"
        );
        assert_eq!(
            read("password='x sslmode=disable'"),
            pairs(&[("password", "x sslmode=disable")]),
            "a quoted value that reads like a setting is a value"
        );
    }

    // Any blank tokio-postgres splits on splits here too: a non-breaking
    // space pasted from a page must not hide a setting inside a value.
    #[test]
    fn unicode_blanks_separate_settings() {
        for given in [
            "host=h user=u\u{a0}sslmode=require",
            "host=h user=u\u{0b}sslmode=require",
            "host=h\u{3000}user=u sslmode=require",
        ] {
            assert_eq!(
                Settings::parse(given).expect(given).get("sslmode"),
                Some("require"),
                "{given:?}"
            );
        }
    }

    // A string that cannot be read is refused, and the refusal quotes
    // none of it: the piece it would quote may be part of a password.
    #[test]
    fn a_broken_string_is_an_error_that_quotes_none_of_it() {
        for broken in [
            "host=h password='zorro1",
            "host=h password=zorro1 quill2",
            "host=h = sslmode=require",
            "host=h password=",
            "host=h password=quill2 zorro1=x",
        ] {
            let why = Settings::parse(broken).expect_err(broken);
            assert!(
                !why.contains("zorro1") && !why.contains("quill2") && !why.contains("host"),
                "{broken:?}: {why}"
            );
            assert!(why.contains("setting number"), "says which: {why}");
        }
    }

    // The keywords are libpq's; tokio-postgres, which the store hands
    // the settings to, knows each of its own among them (the TLS words it
    // does not know the store takes out first): a keyword missing here
    // would refuse a string the store can use.
    #[test]
    fn every_keyword_tokio_postgres_takes_is_one_of_libpqs() {
        let tokio_postgres = [
            ("user", "u"),
            ("password", "p"),
            ("dbname", "d"),
            ("options", "o"),
            ("application_name", "a"),
            ("sslmode", "require"),
            ("sslnegotiation", "direct"),
            ("host", "h"),
            ("hostaddr", "127.0.0.1"),
            ("port", "1"),
            ("connect_timeout", "1"),
            ("tcp_user_timeout", "1"),
            ("keepalives", "1"),
            ("keepalives_idle", "1"),
            ("keepalives_interval", "1"),
            ("keepalives_retries", "1"),
            ("target_session_attrs", "any"),
            ("channel_binding", "prefer"),
            ("load_balance_hosts", "random"),
        ];
        for (key, value) in tokio_postgres {
            assert!(KEYWORDS.contains(&key), "{key} is missing");
            #[cfg(feature = "postgres")]
            assert!(
                format!("{key}={value}")
                    .parse::<tokio_postgres::Config>()
                    .is_ok(),
                "tokio-postgres takes {key}"
            );
            let _ = value;
        }
        #[cfg(feature = "postgres")]
        assert!(
            "colour=blue".parse::<tokio_postgres::Config>().is_err(),
            "tokio-postgres refuses a word it does not know, as libpq does"
        );
    }

    // What a client library is handed must read back as the same
    // settings, whatever they hold.
    #[test]
    fn the_client_string_reads_back_as_the_same_settings() {
        let given = "host=h password='a \\'b\\\\ c' user= u application_name='' options=é☃";
        let settings = Settings::parse(given).expect("given");
        let again = Settings::parse(&settings.to_client_string()).expect("written");
        assert_eq!(
            again
                .0
                .iter()
                .map(|s| (&s.key, &s.value))
                .collect::<Vec<_>>(),
            settings
                .0
                .iter()
                .map(|s| (&s.key, &s.value))
                .collect::<Vec<_>>()
        );
        assert_eq!(
            settings.to_string(),
            "host=h password=*** user=u application_name='' options=é☃",
            "shown with the password hidden"
        );
    }
}
