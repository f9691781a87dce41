//! The one reading of a store URL ([`StoreUrl`]), its scheme and its
//! percent-escapes: every store reads its URL through it, and
//! [`redacted`](super::redacted) shows one through it, so that what is
//! hidden is exactly what a store takes for a password.

use std::borrow::Cow;
use std::fmt;

/// What stands in for a secret in anything shown.
pub(super) const HIDDEN: &str = "***";

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

/// Whether the value of the setting `name` is a secret: a password of
/// any kind (`password`, PostgreSQL's `sslpassword`, Sentinel's
/// `sentinel_password`), or Redis's socket URLs' `pass`.
pub(super) fn is_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    name == "pass" || name.ends_with("password")
}

/// One host of a [`StoreUrl`], and its port when the URL gives one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    name: String,
    port: Option<u16>,
}

impl Host {
    /// The host as written: a name, an IPv4 address, an IPv6 address in
    /// brackets, or (PostgreSQL) a socket directory's path, escaped.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The host without the brackets of an IPv6 address: what a TLS
    /// certificate names, and what a socket address is made of.
    pub fn bare(&self) -> &str {
        self.name
            .strip_prefix('[')
            .and_then(|name| name.strip_suffix(']'))
            .unwrap_or(&self.name)
    }

    /// The port, when the URL gives one.
    pub fn port(&self) -> Option<u16> {
        self.port
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A store URL, read the one way every store reads it:
///
/// ```text
/// scheme://[user[:password]@]host[:port][,host[:port]...][/path][?key=value[&key=value...]][#fragment]
/// ```
///
/// - The user info runs to the **last** `@` before the first `/`: a
///   password may hold `@`, `:`, `?`, `,`, `#`, `=`, blanks and quotes as
///   they are; only a `/` must be written `%2F`. The user ends at the
///   first `:`. A raw `@` after the hosts, in the path, the query or the
///   fragment (a `/` left in a password), is refused rather than guessed
///   at; in a URL without a `/`, an `@` in the query is taken for the end
///   of the user info. Write an `@` after the hosts `%40`.
/// - Hosts are separated by commas; a port is digits after a `:` (after
///   the `]` of an IPv6 address in brackets).
/// - The query's settings are separated by `&`, each `key=value`.
/// - `%XX` escapes are decoded in the user, the password, the path and
///   the query (a `%` that starts no escape is kept, as libpq and URL
///   parsers keep it); `+` is a plus, not a blank.
///
/// Its `Display` and `Debug` show it with `***` for the password, for the
/// value of every setting that holds one (`password`, `sslpassword`,
/// `sentinel_password`, Redis's `pass`) and for the fragment; what a
/// client library is handed is [`to_client_url`](StoreUrl::to_client_url).
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use lock_core::store::kit::StoreUrl;
///
/// let url = StoreUrl::parse("redis://app:pa?ss,w@rd@cache:6379/2").expect("a URL");
/// assert_eq!(url.password(), Some("pa?ss,w@rd"));
/// assert_eq!(url.hosts()[0].to_string(), "cache:6379");
/// assert_eq!(url.to_string(), "redis://app:***@cache:6379/2");
/// ```
#[derive(Clone)]
pub struct StoreUrl {
    scheme: String,
    user: Option<String>,
    password: Option<String>,
    hosts: Vec<Host>,
    path: Option<String>,
    query: Vec<(String, String)>,
    fragment: Option<String>,
    /// Each secret as written in the text read, escapes and all: what a
    /// client library handed that text may quote.
    written: Vec<String>,
}

impl StoreUrl {
    /// Reads one URL. The error says what is wrong, and never quotes the
    /// text: a text that cannot be read may hold a password anywhere.
    pub fn parse(text: &str) -> Result<StoreUrl, String> {
        let Some((scheme, rest)) = scheme(text) else {
            return Err(
                "it has no scheme (like redis://) to say which store, or one with characters no scheme has"
                    .to_owned(),
            );
        };
        let mut written = Vec::new();
        let authority = rest.find('/').unwrap_or(rest.len());
        let (userinfo, rest) = match rest[..authority].rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(userinfo) => {
                let (user, password) = match userinfo.split_once(':') {
                    Some((user, password)) => (user, Some(password)),
                    None => (userinfo, None),
                };
                let password = password.filter(|password| !password.is_empty());
                if let Some(password) = password {
                    written.push(password.to_owned());
                }
                (
                    Some(percent_decode(user)?).filter(|user| !user.is_empty()),
                    password.map(percent_decode).transpose()?,
                )
            }
        };
        // The user info ended at the last `@` before the first `/`: an
        // `@` after it is most likely the end of a password with a `/` left
        // raw in it, whose pieces would be read as a path, a query and a
        // fragment.
        if rest.contains('@') {
            return Err(
                "it has an `@` after the host: a `/` in a password must be written %2F (and an `@` in a path, a query or a fragment %40)"
                    .to_owned(),
            );
        }
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let hosts = hosts(&rest[..end])?;
        let mut rest = &rest[end..];
        let mut path = None;
        if let Some(after) = rest.strip_prefix('/') {
            let end = after.find(['?', '#']).unwrap_or(after.len());
            path = Some(percent_decode(&after[..end])?);
            rest = &after[end..];
        }
        let mut query = Vec::new();
        if let Some(after) = rest.strip_prefix('?') {
            let end = after.find('#').unwrap_or(after.len());
            for pair in after[..end].split('&').filter(|pair| !pair.is_empty()) {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                let key = percent_decode(key)?;
                if is_secret(&key) && !value.is_empty() {
                    written.push(value.to_owned());
                }
                query.push((key, percent_decode(value)?));
            }
            rest = &after[end..];
        }
        let fragment = rest.strip_prefix('#').map(str::to_owned);
        Ok(StoreUrl {
            scheme: scheme.into_owned(),
            user,
            password,
            hosts,
            path,
            query,
            fragment,
            written,
        })
    }

    /// Reads one URL or several separated by commas (a cluster's seeds,
    /// etcd's members): a new URL starts at each comma followed by a
    /// scheme and `://`; any other comma separates the hosts of one URL.
    pub fn parse_list(text: &str) -> Result<Vec<StoreUrl>, String> {
        let mut urls = Vec::new();
        let mut start = 0;
        for (at, _) in text.match_indices(',') {
            if scheme(text[at + 1..].trim_start()).is_some() {
                urls.push(StoreUrl::parse(text[start..at].trim())?);
                start = at + 1;
            }
        }
        urls.push(StoreUrl::parse(text[start..].trim())?);
        Ok(urls)
    }

    /// The scheme, lowercased.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The user, decoded; `None` when the URL names none.
    pub fn user(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password, decoded; `None` when the URL gives none.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The hosts, in order (none for a socket URL like `unix:///path`).
    pub fn hosts(&self) -> &[Host] {
        &self.hosts
    }

    /// The path after the hosts' `/`, decoded; `None` without a `/`.
    pub fn path(&self) -> Option<&str> {
        self.path.as_deref()
    }

    /// The query's settings, decoded, in order.
    pub fn query(&self) -> impl Iterator<Item = (&str, &str)> {
        self.query
            .iter()
            .map(|(key, value)| (key.as_str(), value.as_str()))
    }

    /// The value of the last setting `key` in the query.
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// Takes every setting named one of `keys` out of the query, and
    /// returns them in order.
    pub fn take_settings(&mut self, keys: &[&str]) -> Vec<(String, String)> {
        let (taken, kept) = std::mem::take(&mut self.query)
            .into_iter()
            .partition(|(key, _)| keys.contains(&key.as_str()));
        self.query = kept;
        taken
    }

    /// The fragment after `#`, as written.
    pub fn fragment(&self) -> Option<&str> {
        self.fragment.as_deref()
    }

    /// The same URL with `scheme` and only the `host`: one node of a
    /// cluster, with the credentials and settings of the whole.
    pub fn with_host(&self, scheme: &str, host: Host) -> StoreUrl {
        StoreUrl {
            scheme: scheme.to_owned(),
            hosts: vec![host],
            ..self.clone()
        }
    }

    /// The URL for a client library to read, password included, every
    /// part escaped so that the library reads what this did: never show
    /// it.
    pub fn to_client_url(&self) -> String {
        self.written(false)
    }

    /// Every form of every secret in the URL: as decoded, as written, and
    /// as [`to_client_url`](StoreUrl::to_client_url) escapes it.
    pub(super) fn secrets(&self) -> Vec<String> {
        let decoded = self.password.iter().chain(
            self.query
                .iter()
                .filter(|(key, _)| is_secret(key))
                .map(|(_, value)| value),
        );
        let mut secrets = Vec::new();
        for secret in decoded {
            secrets.push(escape(secret, b"").into_owned());
            secrets.push(secret.clone());
        }
        secrets.extend(self.written.iter().cloned());
        secrets.extend(self.fragment.iter().cloned());
        secrets
    }

    /// The URL as text, with `***` for its secrets when `hide`.
    fn written(&self, hide: bool) -> String {
        let mut text = format!("{}://", self.scheme);
        if let Some(user) = &self.user {
            text.push_str(&escape(user, b""));
        }
        if let Some(password) = &self.password {
            text.push(':');
            let shown = if hide {
                Cow::Borrowed(HIDDEN)
            } else {
                escape(password, b"")
            };
            text.push_str(&shown);
        }
        if self.user.is_some() || self.password.is_some() {
            text.push('@');
        }
        let hosts: Vec<String> = self.hosts.iter().map(Host::to_string).collect();
        text.push_str(&hosts.join(","));
        if let Some(path) = &self.path {
            text.push('/');
            text.push_str(&escape(path, b"/"));
        }
        for (at, (key, value)) in self.query.iter().enumerate() {
            text.push(if at == 0 { '?' } else { '&' });
            text.push_str(&escape(key, b"/:,"));
            text.push('=');
            if hide && is_secret(key) {
                text.push_str(HIDDEN);
            } else {
                text.push_str(&escape(value, b"/:,"));
            }
        }
        if let Some(fragment) = &self.fragment {
            text.push('#');
            text.push_str(if hide { HIDDEN } else { fragment });
        }
        text
    }
}

/// Two URLs are equal when they say the same, however they were written.
impl PartialEq for StoreUrl {
    fn eq(&self, other: &Self) -> bool {
        self.to_client_url() == other.to_client_url()
    }
}

impl Eq for StoreUrl {}

/// Shown with `***` for every secret.
impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written(true))
    }
}

/// As `Display`: never a secret.
impl fmt::Debug for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreUrl({self})")
    }
}

/// The comma-separated hosts of a URL; none when `text` is empty.
fn hosts(text: &str) -> Result<Vec<Host>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    text.split(',')
        .map(|host_text| host(host_text.trim()))
        .collect()
}

/// `host[:port]`, or `[v6][:port]`.
fn host(text: &str) -> Result<Host, String> {
    let (name, port) = if text.starts_with('[') {
        let close = text
            .find(']')
            .ok_or("an IPv6 address in brackets has no `]`")?;
        match &text[close + 1..] {
            "" => (&text[..=close], None),
            after => match after.strip_prefix(':') {
                Some(port) => (&text[..=close], Some(port)),
                None => {
                    return Err(
                        "an IPv6 address in brackets is followed by more than a port".to_owned(),
                    );
                }
            },
        }
    } else {
        match text.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (text, None),
        }
    };
    if name.is_empty() {
        return Err("a host is empty: write host[:port], separated by commas".to_owned());
    }
    if name.contains(char::is_whitespace) {
        return Err("a host holds a blank".to_owned());
    }
    let port = match port.filter(|port| !port.is_empty()) {
        None => None,
        Some(port) => Some(
            port.parse::<u16>()
                .ok()
                .filter(|_| port.bytes().all(|b| b.is_ascii_digit()))
                .ok_or("a host's port is not a number from 0 to 65535")?,
        ),
    };
    Ok(Host {
        name: name.to_owned(),
        port,
    })
}

/// `text` with every byte but the unreserved ones and `keep` as `%XX`.
fn escape<'a>(text: &'a str, keep: &[u8]) -> Cow<'a, str> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b"-._~".contains(&b) || keep.contains(&b);
    if text.bytes().all(plain) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 8);
    for b in text.bytes() {
        if plain(b) {
            escaped.push(b as char);
        } else {
            escaped.push_str(&format!("%{b:02X}"));
        }
    }
    Cow::Owned(escaped)
}

/// `text` with its `%XX` escapes decoded (`p%40ss` is `p@ss`); a `%` that
/// starts no escape stays as written, as libpq and URL parsers keep it.
/// An error only when the decoded bytes are not UTF-8.
pub fn percent_decode(text: &str) -> Result<String, String> {
    if !text.contains('%') {
        return Ok(text.to_owned());
    }
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
    String::from_utf8(out).map_err(|_| "the URL's escapes are not UTF-8".to_owned())
}

#[cfg(test)]
mod tests;
