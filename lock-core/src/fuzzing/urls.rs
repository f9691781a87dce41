//! Store URLs, libpq's `key=value` strings, and their redaction.

use super::Input;
use crate::store::kit::conninfo::Settings;
use crate::store::kit::redact::check_libpq_query;
use crate::store::kit::{StoreUrl, invalid_url, redacted, scrub, secrets};

/// What stands in for a secret in what is shown.
const HIDDEN: &str = "***";

/// [`StoreUrl::parse`] and [`StoreUrl::parse_list`] on any text: no panic;
/// a URL read is written back (for a client library, and as shown) into
/// text that reads as the same URL; the redaction of any text hides every
/// secret the readers find in it.
pub fn check_store_url(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Ok(url) = StoreUrl::parse(&text) {
        reads_back(&url);
        let _ = check_libpq_query(&url);
    }
    if let Ok(urls) = StoreUrl::parse_list(&text) {
        assert!(!urls.is_empty(), "a list read holds at least one URL");
        for url in &urls {
            reads_back(url);
        }
    }
    hides_what_it_reads(&text);
}

/// A URL written back for a client library reads as the same URL, part by
/// part; written as shown, it reads with the same scheme, user, hosts and
/// path, and every secret `***`.
fn reads_back(url: &StoreUrl) {
    let written = url.to_client_url();
    let again = StoreUrl::parse(&written)
        .unwrap_or_else(|why| panic!("{written:?}, written back, does not read: {why}"));
    assert_eq!(again.scheme(), url.scheme(), "the scheme of {written:?}");
    assert_eq!(again.user(), url.user(), "the user of {written:?}");
    assert_eq!(
        again.password(),
        url.password(),
        "the password of {written:?}"
    );
    assert_eq!(again.hosts(), url.hosts(), "the hosts of {written:?}");
    assert_eq!(again.path(), url.path(), "the path of {written:?}");
    assert!(
        again.query().eq(url.query()),
        "the query of {written:?}: {:?} against {:?}",
        again.query().collect::<Vec<_>>(),
        url.query().collect::<Vec<_>>()
    );
    assert_eq!(
        again.fragment(),
        url.fragment(),
        "the fragment of {written:?}"
    );
    let shown = url.to_string();
    let seen = StoreUrl::parse(&shown)
        .unwrap_or_else(|why| panic!("{shown:?}, the URL as shown, does not read: {why}"));
    assert_eq!(seen.user(), url.user(), "the user of {shown:?}");
    assert_eq!(seen.hosts(), url.hosts(), "the hosts of {shown:?}");
    assert_eq!(seen.path(), url.path(), "the path of {shown:?}");
    assert_eq!(
        seen.password(),
        url.password().map(|_| "***"),
        "the password of {shown:?}"
    );
}

/// Whatever `text` is, each secret its readers find is not in what
/// [`redacted`] shows of it, when the secret is one that cannot be in the
/// rest by chance: eight letters and digits or more (which no escaping
/// makes of other text), in the text (or the text decoded), and found at
/// most once in it, in it decoded, in it without `\\` and quotes, and in
/// it decoded and escaped again.
fn hides_what_it_reads(text: &str) {
    // Looked for between the `***`s: a secret that ends in `**` could
    // match the `***` standing for one.
    let shown = redacted(text);
    let forms = [
        text.to_owned(),
        decoded(text),
        text.replace(['\\', '\''], ""),
        escaped(&decoded(text)),
    ];
    for secret in secrets(text) {
        let held = forms[..2].iter().any(|form| form.contains(secret.as_str()));
        let once = forms
            .iter()
            .all(|form| form.matches(secret.as_str()).count() <= 1);
        let plain = secret.len() >= 8 && secret.bytes().all(|b| b.is_ascii_alphanumeric());
        if plain && held && once {
            assert!(
                !shown
                    .split(HIDDEN)
                    .any(|piece| piece.contains(secret.as_str())),
                "{text:?} is shown as {shown:?}, with the secret {secret:?}"
            );
        }
    }
}

/// `text` with its `%XX` escapes decoded, bytes that are not UTF-8
/// replaced.
fn decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let escape = (bytes[at] == b'%')
            .then(|| text.get(at + 1..at + 3))
            .flatten()
            .filter(|hex| hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escape {
            Some(byte) => {
                out.push(byte);
                at += 3;
            }
            None => {
                out.push(bytes[at]);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// libpq's `key=value` strings: no panic; settings read are written back
/// (for a client library) into a string that reads as the same settings;
/// as shown, every secret is `***`; a string refused is refused with a
/// message that quotes none of it. PostgreSQL URLs are read as the store
/// reads them (a [`StoreUrl`], its query checked against libpq's words).
pub fn check_conninfo(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Settings::parse(&text) {
        Ok(settings) => {
            let written = settings.to_client_string();
            let again = Settings::parse(&written)
                .unwrap_or_else(|why| panic!("{written:?}, written back, does not read: {why}"));
            let pairs = |settings: &Settings| -> Vec<(String, String)> {
                settings
                    .0
                    .iter()
                    .map(|setting| (setting.key.clone(), setting.value.clone()))
                    .collect()
            };
            assert_eq!(pairs(&again), pairs(&settings), "{written:?} reads back");
            let shown = settings.to_string();
            let seen = Settings::parse(&shown)
                .unwrap_or_else(|why| panic!("{shown:?}, as shown, does not read: {why}"));
            for (setting, seen) in settings.0.iter().zip(&seen.0) {
                assert_eq!(setting.key, seen.key, "{shown:?}: the keys in order");
                if setting.key.ends_with("password") {
                    assert_eq!(seen.value, "***", "{shown:?}: a password is hidden");
                } else {
                    assert_eq!(setting.value, seen.value, "{shown:?}: the rest is shown");
                }
            }
        }
        Err(why) => {
            // The messages are fixed sentences with a number in them: a
            // word of the text in one could be a piece of a password.
            let fixed: String = why.chars().filter(|c| !c.is_ascii_digit()).collect();
            assert!(
                CONNINFO_ERRORS.contains(&fixed.as_str()),
                "{text:?} is refused with {why:?}, which is not one of the fixed messages"
            );
        }
    }
    if let Some(rest) = text.strip_prefix("postgres://") {
        let url = format!("postgresql://{rest}");
        if let Ok(url) = StoreUrl::parse(&url) {
            reads_back(&url);
            let _ = check_libpq_query(&url);
        }
    }
    hides_what_it_reads(&text);
}

/// Every message [`Settings::parse`] refuses a string with, without its
/// numbers.
const CONNINFO_ERRORS: &[&str] = &[
    "the connection string's setting number  has no `=`; write key=value settings (a value with blanks in single quotes), or a postgres:// URL",
    "the connection string's setting number  has an `=` with no key before it; write key=value settings",
    "the connection string's setting number  is no setting libpq knows (put a value with blanks in single quotes)",
    "the value of the connection string's setting number  opens a quote it never closes",
    "the connection string's setting number  ends at its `=`; write an empty value as ''",
];

/// The first letters of a password's words: none is a hex digit, so no
/// word reads as part of an escape.
const FIRST: &[u8] = b"GHJKLMNPQRSTVWXYZ";
/// The other letters: no `l`, `0` or `1`, so words are told apart.
const REST: &[u8] = b"abcdefghijkmnopqrstuvwxyz23456789";

/// What stands between a password's words: every character a URL or
/// `key=value` reader treats specially, escapes, and non-ASCII text.
const JOINS: &[&str] = &[
    " ", "\t", "'", "\"", "@", "?", ",", "=", "%", "%41", "%2F", ":", "#", "&", ";", "\\", "/",
    "/?", "é", "☃", "@?", ",@", "='", "%25", "+", "\u{a0}", "[", "]",
];

/// The schemes a password is tried under.
const SCHEMES: &[&str] = &[
    "redis",
    "rediss",
    "redis+cluster",
    "redis+sentinel",
    "redis+unix",
    "unix",
    "postgres",
    "postgresql",
    "memcache",
    "memcaches",
    "etcd",
    "etcds",
    "memory",
];

/// The settings a password is given as in a URL's query or a `key=value`
/// string.
const SECRET_KEYS: &[&str] = &["password", "sslpassword", "sentinel_password", "pass"];

/// A password of one to three words (what a leak would show: six
/// characters each, from [`FIRST`] and [`REST`]), joined by [`JOINS`],
/// sometimes with a join at either end.
fn password(input: &mut Input<'_>) -> (String, Vec<String>) {
    let mut text = String::new();
    let mut words = Vec::new();
    if input.below(3) == 0 {
        text.push_str(JOINS[input.below(JOINS.len())]);
    }
    for at in 0..1 + input.below(3) {
        if at > 0 {
            text.push_str(JOINS[input.below(JOINS.len())]);
        }
        let mut word = String::from(FIRST[input.below(FIRST.len())] as char);
        for _ in 0..5 {
            word.push(REST[input.below(REST.len())] as char);
        }
        text.push_str(&word);
        words.push(word);
    }
    if input.below(3) == 0 {
        text.push_str(JOINS[input.below(JOINS.len())]);
    }
    (text, words)
}

/// `text` with every byte but the unreserved ones as `%XX`, as a careful
/// user escapes a password.
fn escaped(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `value` in single quotes, as libpq reads it back.
fn quoted(value: &str) -> String {
    format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"))
}

/// A store URL or `key=value` string built from the input around a
/// password of distinctive words, written raw or escaped: what
/// [`redacted`], [`invalid_url`] and a URL's `Debug` show of it never
/// holds a word; and when the password was written escaped (or quoted)
/// and the store's readers read it whole, [`scrub`] hides it in a message
/// that quotes it in any form.
///
/// Left out are the texts whose readers take a word for something that is
/// shown by design: a host name (which takes any character but a blank,
/// `/`, `?`, `#` and `,`), a user name (in a URL with no `/` before the
/// query, the last `@` ends the user info), another setting or its value
/// (after a raw `&` in a query; `user= password=x`; a `key=value` text
/// that reads as a URL).
pub fn check_redaction(data: &[u8]) {
    let mut input = Input::new(data);
    let (secret, words) = password(&mut input);
    let form = input.below(5);
    let careful = input.below(2) == 0;
    let scheme = SCHEMES[input.below(SCHEMES.len())];
    let user = input.text(12);
    let hosts = input.text(24);
    let path = input.text(12);
    let query = input.text(24);
    let other = input.text(24);
    if [scheme, &user, &hosts, &path, &query, &other]
        .iter()
        .any(|part| words.iter().any(|word| part.contains(word.as_str())))
    {
        // The input repeats a word elsewhere: a word shown there is no leak.
        return;
    }
    let written = if careful {
        escaped(&secret)
    } else {
        secret.clone()
    };
    let key = SECRET_KEYS[input.below(SECRET_KEYS.len())];
    let libpq_key = ["password", "sslpassword"][input.below(2)];
    let blank = [" ", "  ", "\t", "\u{a0}"][input.below(4)];
    let around = ["=", " = ", "= ", " ="][input.below(4)];
    let written = if form > 2 && careful {
        quoted(&secret)
    } else {
        written
    };
    // In the query form, an `@` elsewhere would end the user info (see
    // below): the parts around the password hold none.
    let [hosts, path, query, other] = [hosts, path, query, other].map(|part| {
        if form == 1 {
            part.replace('@', "")
        } else {
            part
        }
    });
    let text = match form {
        0 => format!("{scheme}://{user}:{written}@{hosts}{path}{query}"),
        1 => format!("{scheme}://{user}@{hosts}{path}?{query}&{key}={written}&{other}"),
        2 => format!("{scheme}://{other},{scheme}://{user}:{written}@{hosts}{path}{query}"),
        _ => format!("{user}{blank}{libpq_key}{around}{written}{blank}{other}"),
    };
    if words
        .iter()
        .any(|word| text.matches(word.as_str()).count() > written.matches(word.as_str()).count())
    {
        // The parts put together repeat a word (one part ends where the
        // next goes on): a word shown there is no leak.
        return;
    }
    let before_secret = format!("{user}{hosts}{path}{query}");
    if form == 1 && written.contains('&') {
        // A raw `&` ends a query's value: what follows is another setting.
        return;
    }
    if form < 3
        && [&user, &hosts, &path, &query, &other]
            .iter()
            .any(|part| part.contains("://"))
    {
        // A part that starts another URL of a list: not the URL meant.
        return;
    }
    if form == 1 && !before_secret.contains('/') && written.contains(['@', '/']) {
        // Documented: the user info runs to the last `@` before the first
        // `/` (as libpq reads it): with none before the query, a raw `@`
        // in it ends the user info, and the query before it is taken for
        // a user name, which is shown; a raw `/` in it ends the hosts, and
        // the query before it is taken for a host.
        return;
    }
    if form > 2 && crate::store::kit::scheme(text.trim()).is_some() {
        // Read as a URL, whose host the setting then is: a host is shown.
        return;
    }
    let in_a_host = StoreUrl::parse_list(text.trim()).is_ok_and(|urls| {
        urls.iter()
            .flat_map(StoreUrl::hosts)
            .any(|host| words.iter().any(|word| host.name().contains(word.as_str())))
    });
    let in_a_setting = Settings::parse(text.trim()).is_ok_and(|settings| {
        settings.0.iter().any(|setting| {
            !setting.key.ends_with("password")
                && words
                    .iter()
                    .any(|word| setting.value.contains(word.as_str()))
        })
    });
    if in_a_host || in_a_setting {
        // Read as a host name (a host takes any character but a blank,
        // `/`, `?`, `#` and `,`), or as the value of another setting
        // (`user= password=x` is the user `password=x`, as libpq reads
        // it): both are shown.
        return;
    }
    let leaked = |shown: &str| {
        words
            .iter()
            .find(|word| shown.contains(word.as_str()))
            .cloned()
    };
    let shown = redacted(&text);
    assert_eq!(
        leaked(&shown),
        None,
        "{text:?} is shown as {shown:?}, with a piece of its password"
    );
    let error = invalid_url(&text, "it is refused").to_string();
    assert_eq!(leaked(&error), None, "{text:?} gives the error {error:?}");
    for url in StoreUrl::parse_list(text.trim()).unwrap_or_default() {
        let debug = format!("{url:?}");
        assert_eq!(leaked(&debug), None, "{text:?} is debugged as {debug:?}");
    }
    // The password as the readers read it, when they read the text.
    let read = match form {
        0 | 2 => StoreUrl::parse_list(&text)
            .ok()
            .and_then(|urls| urls.last()?.password().map(str::to_owned)),
        1 => StoreUrl::parse(&text)
            .ok()
            .and_then(|url| url.setting(key).map(str::to_owned)),
        _ => Settings::parse(&text)
            .ok()
            .and_then(|settings| settings.get(libpq_key).map(str::to_owned)),
    };
    if careful && read.as_deref() == Some(secret.as_str()) && !secrets(&text).is_empty() {
        // Read whole, and by the store's reader (a PostgreSQL URL's query
        // holds only libpq's words): a client library handed it may quote
        // it decoded, or as the text wrote it.
        let message = format!("failed: {text} ({secret}, {written})");
        let scrubbed = scrub(&message, &text);
        assert_eq!(
            leaked(&scrubbed),
            None,
            "{text:?}: a message quoting the password is scrubbed to {scrubbed:?}"
        );
    }
}
