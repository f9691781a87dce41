//! What every store's URL handling shares: the scheme, percent-escapes, and
//! keeping the URL's secrets out of anything shown.
//!
//! A store URL often carries a password (`redis://:pw@host`,
//! `postgres://app:pw@db/app`, `?sentinel_password=pw`). Errors and `Debug`
//! output end up in logs and on terminals, so whatever a store or
//! [`connect`](crate::connect) shows of a URL goes through [`redacted`],
//! and text that may quote one (a client library's error) through
//! [`scrub`].

use std::borrow::Cow;

use crate::Error;

/// What stands in for a secret in anything shown.
const HIDDEN: &str = "***";

/// `url`'s scheme, lowercased, and what follows its `://`; `None` when it
/// has no scheme.
pub fn scheme(url: &str) -> Option<(Cow<'_, str>, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let plain = !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    if !plain {
        return None;
    }
    let scheme = if scheme.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(scheme.to_ascii_lowercase())
    } else {
        Cow::Borrowed(scheme)
    };
    Some((scheme, rest))
}

/// The secrets in `url`, so that any text about to be shown can be
/// scrubbed of them, whatever produced it: the password of every
/// `user:password@` part (a list of URLs separated by commas has one per
/// URL), and the value of every setting whose name ends in `password`
/// (`?sentinel_password=...`, or `password=...` in PostgreSQL's
/// `key=value` form). Each also as it reads once its `%XX` escapes are
/// decoded, as a client library may quote it.
pub fn secrets(url: &str) -> Vec<String> {
    let (addresses, _) = url.split_once('?').unwrap_or((url, ""));
    let in_userinfo = addresses.split(',').filter_map(|part| {
        let rest = part.split_once("://").map_or(part, |(_, rest)| rest);
        // Up to the last `@`, even past a `/`: a password with a `/` or an
        // `@` left unescaped is still a password, and taking a little more
        // than one for a secret only hides a little more.
        let userinfo = &rest[..rest.rfind('@')?];
        // `user@host` carries no password; only `user:password@`.
        let (_, password) = userinfo.split_once(':')?;
        Some(password)
    });
    let in_settings = url
        .split(|c: char| matches!(c, '?' | '&' | ';') || c.is_whitespace())
        .filter_map(|pair| {
            let (name, value) = pair.split_once('=')?;
            name.to_ascii_lowercase()
                .ends_with("password")
                .then(|| value.trim_matches('\''))
        });
    let mut secrets: Vec<String> = Vec::new();
    for secret in in_userinfo.chain(in_settings) {
        if secret.is_empty() {
            continue;
        }
        let decoded = percent_decode(secret).ok();
        for form in std::iter::once(secret).chain(decoded.as_deref()) {
            if !secrets.iter().any(|known| known == form) {
                secrets.push(form.to_owned());
            }
        }
    }
    // Longest first, so a secret that contains another is hidden whole.
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets
}

/// `text` with every one of `secrets` replaced by `***`.
pub fn scrub(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .fold(text.to_owned(), |text, secret| text.replace(secret, HIDDEN))
}

/// `url` as it may be shown: every secret [`secrets`] finds replaced by
/// `***` (`postgres://app:***@db/app`), the rest as given.
pub fn redacted(url: &str) -> String {
    scrub(url, &secrets(url))
}

/// The error for a store URL that cannot be used, saying why; the URL is
/// shown [`redacted`].
pub fn invalid_url(url: &str, reason: impl Into<String>) -> Error {
    Error::InvalidUrl {
        url: redacted(url),
        reason: reason.into(),
    }
}

/// `text` with its `%XX` escapes decoded (`p%40ss` is `p@ss`).
pub fn percent_decode(text: &str) -> Result<String, String> {
    if !text.contains('%') {
        return Ok(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            let hex = text
                .get(at + 1..at + 3)
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
                .ok_or_else(|| "a `%` in the URL must start an escape like %40".to_owned())?;
            out.push(hex);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "the URL's escapes are not UTF-8".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    // Whatever shows a URL (an error, `Debug`, the `locks` tool) shows it
    // through these: a password that slips past them ends up in logs.
    #[test]
    fn passwords_are_found_in_every_url_of_a_list_and_scrubbed() {
        let url = "redis+cluster://admin:hunter2@10.0.0.1:6379,10.0.0.2:6379";
        assert_eq!(
            secrets(url),
            ["hunter2"],
            "the one password of a cluster URL"
        );
        let list = "redis://:s3cret@a:1,redis://u:other@b:2,redis://c:3";
        let found = secrets(list);
        assert!(
            found.contains(&"s3cret".to_owned()) && found.contains(&"other".to_owned()),
            "each URL's password: {found:?}"
        );
        let message = "could not reach redis://u:other@b:2 (auth other failed)";
        let scrubbed = scrub(message, &secrets(list));
        assert!(!scrubbed.contains("other"), "scrubbed: {scrubbed}");
        assert_eq!(
            redacted("postgres://app:pw@db/test"),
            "postgres://app:***@db/test",
            "the user stays, the password goes"
        );
        assert_eq!(
            redacted("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379",
            "a URL without secrets is shown as given"
        );
        let sentinel = "redis+sentinel://:data@s1:26379,s2:26379/mymaster?sentinel_password=watch";
        let found = secrets(sentinel);
        assert!(
            found.contains(&"data".to_owned()) && found.contains(&"watch".to_owned()),
            "the data nodes' and the sentinels' passwords: {found:?}"
        );
        assert!(
            secrets("postgres://postgres@db/test").is_empty(),
            "a user name alone is no secret (scrubbing it would mangle every message)"
        );
    }

    // A client library may quote the password decoded, or the URL may be
    // PostgreSQL's `key=value` form, which has no `user:password@`.
    #[test]
    fn escaped_passwords_and_key_value_settings_are_secrets_too() {
        let url = "redis://admin:p%40ss%3Aword@cache:6379";
        let shown = scrub("auth failed for p@ss:word (p%40ss%3Aword)", &secrets(url));
        assert!(
            !shown.contains("p@ss:word") && !shown.contains("p%40ss"),
            "both forms hidden: {shown}"
        );
        let key_value = "host=db user=app password='hunter2' dbname=app";
        assert!(
            !redacted(key_value).contains("hunter2"),
            "{}",
            redacted(key_value)
        );
        let query = "postgres://app@db/app?sslmode=disable&password=hunter2";
        assert_eq!(
            redacted(query),
            "postgres://app@db/app?sslmode=disable&password=***"
        );
        let unescaped = "redis://admin:pa/ss@word@cache:6379";
        assert!(
            !redacted(unescaped).contains("pa/ss@word"),
            "a password left unescaped is hidden whole: {}",
            redacted(unescaped)
        );
    }

    #[test]
    fn a_scheme_is_read_case_blind_and_only_when_it_is_one() {
        let (lowered, rest) = scheme("REDIS://host:6379").expect("a scheme");
        assert_eq!((&*lowered, rest), ("redis", "host:6379"));
        assert_eq!(
            scheme("redis+cluster://a,b").map(|(s, _)| s.into_owned()),
            Some("redis+cluster".to_owned())
        );
        assert!(scheme("127.0.0.1:6379").is_none(), "no `://`");
        assert!(
            scheme("host=db password=a://b").is_none(),
            "spaces are no part of a scheme"
        );
    }

    #[test]
    fn percent_escapes_decode_and_bad_ones_say_what_an_escape_looks_like() {
        assert_eq!(percent_decode("s%40cret").as_deref(), Ok("s@cret"));
        assert_eq!(percent_decode("plain").as_deref(), Ok("plain"));
        let bad = percent_decode("50%").expect_err("a lone %");
        assert!(bad.contains("%40"), "{bad}");
    }
}
