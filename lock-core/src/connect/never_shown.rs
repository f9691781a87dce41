//! Tests: a password given in a store URL never reaches what
//! [`connect`](super::connect) returns, whatever the URL's form, whatever
//! characters the password holds, and whether the URL was read or not.
//!
//! Every URL here names 127.0.0.1's port 1 (nothing listens there) or a
//! socket that does not exist, so each connect fails fast, as it would in
//! production for a store that is down or a URL that is mistyped: the
//! errors an operator then pastes into a ticket.

use std::time::Duration;

use tokio::task::JoinSet;

use super::connect_with;
use crate::{ConnectOptions, Error};

/// SplitMix64: a small seeded generator, so every run tries the same
/// passwords and a failure can be replayed.
struct Cases(u64);

impl Cases {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What stands between the words of a generated password: every character
/// a URL or `key=value` parser treats specially (blanks, quotes, `@`, `?`,
/// `,`, `=`, `%`, `:`, `#`, `&`, `\`), an escape, and non-ASCII text.
const JOINS: &[&str] = &[
    " ", "  ", "\t", "'", "\"", "@", "?", ",", "=", "%", "%41", ":", "#", "&", ";", "\\", "é", "☃",
    "密", "@?", ",@", "='", "%25", "+",
];

/// A password: one to three words (what a leak would show: six
/// characters, the first a letter that is no hex digit, so that none
/// reads as part of an escape), joined by [`JOINS`], sometimes with a
/// join at either end.
fn password(cases: &mut Cases) -> (String, Vec<String>) {
    const FIRST: &[u8] = b"GHJKLMNPQRSTVWXYZ";
    const REST: &[u8] = b"abcdefghijkmnopqrstuvwxyz23456789";
    let count = 1 + cases.below(3);
    let mut words = Vec::new();
    let mut text = String::new();
    if cases.below(3) == 0 {
        text.push_str(JOINS[cases.below(JOINS.len())]);
    }
    for at in 0..count {
        if at > 0 {
            text.push_str(JOINS[cases.below(JOINS.len())]);
        }
        let mut word = String::from(FIRST[cases.below(FIRST.len())] as char);
        for _ in 0..5 {
            word.push(REST[cases.below(REST.len())] as char);
        }
        text.push_str(&word);
        words.push(word);
    }
    if cases.below(3) == 0 {
        text.push_str(JOINS[cases.below(JOINS.len())]);
    }
    (text, words)
}

/// `text` with every byte but the unreserved ones as `%XX`: the password
/// as a careful user escapes it.
fn escaped(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// `text` as a libpq `key=value` value in single quotes.
#[cfg(feature = "postgres")]
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// Every URL form, with the password `raw` (as written, unescaped) and
/// `escaped`: each store's schemes, lists of URLs, Sentinel's two
/// passwords, Redis's socket URLs, etcd's member lists, and URLs no store
/// can read.
fn urls(raw: &str, escaped: &str) -> Vec<String> {
    let at = "127.0.0.1:1";
    vec![
        format!("redis://user:{raw}@{at}/0"),
        format!("redis://:{escaped}@{at}"),
        format!("rediss://user:{raw}@{at}"),
        format!("REDIS://user:{raw}@{at}"),
        format!("redis+cluster://user:{raw}@{at},127.0.0.1:2"),
        format!("rediss+cluster://user:{escaped}@{at}"),
        format!("redis://user:{raw}@{at},redis://127.0.0.1:2"),
        format!("redis+sentinel://user:{raw}@{at},127.0.0.1:2/main?sentinel_password={escaped}"),
        format!("rediss+sentinel://:{escaped}@{at}/main"),
        format!("redis+unix:///nonexistent/redis.sock?pass={escaped}"),
        format!("unix:///nonexistent/redis.sock?db=0&pass={escaped}"),
        format!("memcache://user:{raw}@{at}"),
        format!("memcaches://user:{escaped}@{at}"),
        format!("postgres://user:{raw}@{at}/db"),
        format!("postgresql://user:{escaped}@{at},127.0.0.1:2/db?sslmode=disable"),
        format!("postgres://user@{at}/db?password={escaped}"),
        format!("etcd://user:{raw}@{at},127.0.0.1:2"),
        format!("http://user:{escaped}@{at},http://127.0.0.1:2"),
        format!("https://user:{raw}@{at}"),
        // Unreadable, or read and refused.
        format!("ftp://user:{raw}@{at}"),
        format!("redis://user:{raw}@"),
        format!("redis://user:{raw}@{at}/not-a-db"),
        format!("postgres://user:{raw}@127.0.0.1:port/db"),
        format!("redis+sentinel://:{raw}@{at}"),
        format!("memory://user:{raw}@host"),
        format!("user:{raw}@{at}"),
        format!("redis://user:{raw}@{at}?protocol=carrier-pigeon"),
    ]
}

/// libpq's `key=value` forms of a connection string with the password:
/// quoted with escapes, with blanks around `=`, unquoted with `\` before
/// each blank, and as given (which may not parse).
#[cfg(feature = "postgres")]
fn key_values(raw: &str) -> Vec<String> {
    let unquoted: String = raw
        .chars()
        .flat_map(|c| {
            let escape = c.is_whitespace() || c == '\\' || c == '\'';
            escape.then_some('\\').into_iter().chain([c])
        })
        .collect();
    vec![
        format!(
            "host=127.0.0.1 port=1 user=u password={} dbname=db",
            quoted(raw)
        ),
        format!("host=127.0.0.1 port=1 password = {} user=u", quoted(raw)),
        format!("password={unquoted} host=127.0.0.1 port=1 user=u"),
        format!("host=127.0.0.1 port=1 user=u password={raw}"),
    ]
}

/// Everything an error shows: its `Display`, its `Debug`, and each of its
/// causes' `Display` and `Debug`.
fn everything_shown(error: &Error) -> String {
    let mut shown = format!("{error}\n{error:?}");
    let mut cause = std::error::Error::source(error);
    while let Some(next) = cause {
        shown.push_str(&format!("\n{next}\n{next:?}"));
        cause = next.source();
    }
    shown
}

/// The first of `words` that `shown` holds.
fn leaked<'a>(shown: &str, words: &'a [String]) -> Option<&'a String> {
    words.iter().find(|word| shown.contains(word.as_str()))
}

/// Connects to each of `urls` at once (each fails within its time bound),
/// and panics naming the first whose error shows one of `words`.
async fn check(attempts: Vec<(String, Vec<String>)>) {
    let mut connecting = JoinSet::new();
    for (url, words) in attempts {
        connecting.spawn(async move {
            let options = ConnectOptions::new().timeout(Duration::from_millis(300));
            let outcome = connect_with(&url, options).await;
            (url, words, outcome)
        });
    }
    while let Some(done) = connecting.join_next().await {
        let (url, words, outcome) = done.expect("a connect does not panic");
        let error = match outcome {
            Ok(manager) => panic!("{url:?} connected: {manager:?}"),
            Err(error) => error,
        };
        let shown = everything_shown(&error);
        assert_eq!(
            leaked(&shown, &words),
            None,
            "connect({url:?}) shows a piece of the password:\n{shown}"
        );
    }
}

// Passwords that have leaked before: a blank after a quote, a `?` or a
// `,` in the user info, an `@` and a `:` in the password, escapes.
#[tokio::test]
async fn no_url_form_shows_a_password_that_has_leaked_before() {
    let passwords = [
        "Zorro1 Quill2",
        "Zorro1?Quill2",
        "Zorro1,Quill2",
        "Zorro1@Quill2:Tiger3",
        "'Zorro1 Quill2'",
        "Zorro1%Quill2",
        "Zorro1%41Quill2",
        "Zorro1=Quill2&Tiger3",
        "Zorro1#Quill2",
        "Zorro1 é☃ Quill2",
    ];
    let mut attempts = Vec::new();
    for password in passwords {
        let words: Vec<String> = ["Zorro1", "Quill2", "Tiger3"]
            .into_iter()
            .filter(|word| password.contains(word))
            .map(str::to_owned)
            .collect();
        for url in urls(password, &escaped(password)) {
            attempts.push((url, words.clone()));
        }
    }
    check(attempts).await;
}

// A property: for generated passwords holding any of the characters the
// parsers treat specially, in every URL form, the password never appears
// in the error connect returns, its causes, or their `Debug` output.
#[tokio::test]
async fn generated_passwords_never_appear_in_what_connect_returns() {
    let mut cases = Cases(0x10c4_c0de);
    let mut attempts = Vec::new();
    for _ in 0..160 {
        let (password, words) = password(&mut cases);
        let forms = urls(&password, &escaped(&password));
        let url = forms[cases.below(forms.len())].clone();
        attempts.push((url, words));
    }
    check(attempts).await;
}

// PostgreSQL's `key=value` strings do not go through `connect` (they have
// no scheme), but through the store's own constructor, whose errors the
// same rule holds for.
#[cfg(feature = "postgres")]
#[tokio::test]
async fn generated_passwords_never_appear_in_a_key_value_strings_errors() {
    use crate::{PostgresConfig, PostgresStore};
    let mut cases = Cases(0x5eed_0f1b);
    for _ in 0..64 {
        let (password, words) = password(&mut cases);
        for text in key_values(&password) {
            let config = PostgresConfig::new().timeout(Duration::from_millis(300));
            let error = match PostgresStore::connect_with(&text, config).await {
                Ok(store) => panic!("{text:?} connected: {store:?}"),
                Err(error) => error,
            };
            let shown = everything_shown(&error);
            assert_eq!(
                leaked(&shown, &words),
                None,
                "PostgresStore::connect({text:?}) shows a piece of the password:\n{shown}"
            );
        }
    }
}

// A configuration's `Debug` is logged at startup: the etcd user's
// password, the one a configuration holds, is never in it.
#[cfg(feature = "etcd")]
#[test]
fn generated_passwords_never_appear_in_a_configurations_debug_output() {
    use crate::EtcdConfig;
    let mut cases = Cases(0xdeb6);
    for _ in 0..64 {
        let (password, words) = password(&mut cases);
        let config = EtcdConfig::new().user("locks", password.clone());
        let options = ConnectOptions::new().etcd(config.clone());
        let shown = format!("{config:?}\n{options:?}");
        assert_eq!(leaked(&shown, &words), None, "{password:?}: {shown}");
    }
}
