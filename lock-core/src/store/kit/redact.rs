//! Keeping a store URL's secrets out of everything shown.
//!
//! A store URL often carries a password (`redis://:pw@host`,
//! `postgres://app:pw@db/app`, `?sentinel_password=pw`, libpq's
//! `password = 'pw'`). Errors and `Debug` output end up in logs and on
//! terminals, so whatever a store or [`connect`](crate::connect) shows of
//! a URL goes through [`redacted`], and text that may quote one (a client
//! library's error) through [`scrub`].
//!
//! Both read the URL with the very readers the stores read it with
//! ([`StoreUrl`], and libpq's `key=value` form), never with a pattern of
//! their own: what a store takes for a password is what is hidden, in
//! every form a reader accepts. A text neither reads is not shown at all.

use super::conninfo::{Settings, check_keyword};
use super::url::{StoreUrl, scheme};
use crate::Error;

/// A store's connection text, read: one URL or several, or libpq's
/// `key=value` settings.
enum Read {
    Urls(Vec<StoreUrl>),
    Settings(Settings),
}

impl Read {
    /// `text` read as a list of URLs when it starts with a scheme, as
    /// `key=value` settings when it does not.
    fn parse(text: &str) -> Result<Read, String> {
        if scheme(text).is_none() {
            return Settings::parse(text).map(Read::Settings);
        }
        let urls = StoreUrl::parse_list(text)?;
        for url in &urls {
            check_libpq_query(url)?;
        }
        Ok(Read::Urls(urls))
    }
}

/// Checks that the query of a `postgres://` (or `postgresql://`) URL holds
/// only libpq's keywords, as libpq reads it ("invalid URI query
/// parameter"); other URLs pass.
pub(crate) fn check_libpq_query(url: &StoreUrl) -> Result<(), String> {
    if !matches!(url.scheme(), "postgres" | "postgresql") {
        return Ok(());
    }
    for (at, (key, _)) in url.query().enumerate() {
        check_keyword(key, at + 1).map_err(|_| {
            format!(
                "the URL's query setting number {} is no setting libpq knows (a `&` in a value must be written %26)",
                at + 1
            )
        })?;
    }
    Ok(())
}

/// `text` (a store URL, several separated by commas, or libpq's
/// `key=value` string) as it may be shown: read as the stores read it,
/// then written back with `***` for every password and every setting that
/// holds one (`postgres://app:***@db/app`). A text that cannot be read is
/// not shown: only its scheme, if it has one, and a note that the rest is
/// left out.
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use lock_core::store::kit::redacted;
///
/// assert_eq!(redacted("redis://app:pa?ss@cache:6379"), "redis://app:***@cache:6379");
/// assert_eq!(redacted("host=db password = 'a b'"), "host=db password=***");
/// assert!(!redacted("host=db password='open").contains("open"));
/// ```
pub fn redacted(text: &str) -> String {
    let text = text.trim();
    match Read::parse(text) {
        Ok(Read::Urls(urls)) => {
            let shown: Vec<String> = urls.iter().map(StoreUrl::to_string).collect();
            shown.join(",")
        }
        Ok(Read::Settings(settings)) => settings.to_string(),
        Err(_) => match scheme(text) {
            Some((scheme, _)) => {
                format!(
                    "{scheme}://... (the rest not shown: it could not be read, and may hold a password)"
                )
            }
            None => "(not shown: it could not be read, and may hold a password)".to_owned(),
        },
    }
}

/// Every form of every secret in `text` (as [`redacted`] reads it): as
/// read, as written, and as escaped for a client library; longest first,
/// so that one holding another is hidden whole. None when `text` cannot
/// be read: then nothing was handed to a client library to quote.
pub(crate) fn secrets(text: &str) -> Vec<String> {
    let found = match Read::parse(text.trim()) {
        Ok(Read::Urls(urls)) => urls.iter().flat_map(StoreUrl::secrets).collect(),
        Ok(Read::Settings(settings)) => settings.secrets(),
        Err(_) => Vec::new(),
    };
    let mut secrets: Vec<String> = Vec::new();
    for secret in found {
        if !secret.is_empty() && !secrets.contains(&secret) {
            secrets.push(secret);
        }
    }
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    secrets
}

/// `text` (a client library's error, say) with every secret of `url` in
/// it replaced by `***`, in any form the secret may take: as written in
/// the URL, decoded, or escaped.
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use lock_core::store::kit::scrub;
///
/// let url = "redis://admin:p%40ss@cache:6379";
/// assert_eq!(scrub("AUTH p@ss refused", url), "AUTH *** refused");
/// ```
pub fn scrub(text: &str, url: &str) -> String {
    scrub_all(text, &secrets(url))
}

/// `text` with each of `secrets` replaced by `***`.
pub(crate) fn scrub_all(text: &str, secrets: &[String]) -> String {
    secrets.iter().fold(text.to_owned(), |text, secret| {
        text.replace(secret.as_str(), super::url::HIDDEN)
    })
}

/// The error for a store URL that cannot be used, saying why; the URL is
/// shown [`redacted`].
pub fn invalid_url(url: &str, reason: impl Into<String>) -> Error {
    Error::InvalidUrl {
        url: redacted(url),
        reason: reason.into(),
    }
}

#[cfg(test)]
mod tests;
