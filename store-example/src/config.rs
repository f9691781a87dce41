//! [`MapConfig`], and the `map://host:port` URL a
//! [`MapStore`](crate::MapStore) connects to.

use std::time::Duration;

use lock_core::Result;
use lock_core::store::kit::{StoreUrl, invalid_url};

/// The default bound on every call.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

/// How a [`MapStore`](crate::MapStore) behaves: the time bound on each of
/// its calls.
///
/// ```
/// use std::time::Duration;
/// use lock_store_example::MapConfig;
///
/// let config = MapConfig::new().timeout(Duration::from_secs(1));
/// # let _ = config;
/// ```
#[derive(Clone, Debug)]
#[must_use = "a MapConfig does nothing until passed to MapStore::connect_with"]
pub struct MapConfig {
    pub(crate) timeout: Duration,
}

impl Default for MapConfig {
    fn default() -> Self {
        MapConfig {
            timeout: DEFAULT_TIMEOUT,
        }
    }
}

impl MapConfig {
    /// The defaults: a 3 s timeout.
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest any one call (connect, acquire, release, extend...) may
    /// take, waiting for the connection included, before it fails with
    /// [`Error::Store`](lock_core::Error::Store). Default 3 s;
    /// `Duration::MAX` means no bound. A zero timeout is raised to 1 ms.
    pub fn timeout(self, timeout: Duration) -> Self {
        MapConfig {
            timeout: timeout.max(Duration::from_millis(1)),
        }
    }
}

/// `host:port` from a `map://host:port` URL, read as every store URL is
/// read ([`StoreUrl`]); a URL that is not one is
/// [`Error::InvalidUrl`](lock_core::Error::InvalidUrl), shown redacted.
pub(crate) fn address(url: &str) -> Result<String> {
    let shape = "use a URL like map://127.0.0.1:7070";
    let parsed = StoreUrl::parse(url).map_err(|why| invalid_url(url, format!("{why}; {shape}")))?;
    if parsed.scheme() != "map" {
        return Err(invalid_url(
            url,
            format!("the scheme is {}://, not map://; {shape}", parsed.scheme()),
        ));
    }
    if parsed.user().is_some() || parsed.password().is_some() {
        return Err(invalid_url(
            url,
            "the map server has no authentication; leave credentials out of the URL",
        ));
    }
    let extra = parsed.path().is_some_and(|path| !path.is_empty())
        || parsed.query().next().is_some()
        || parsed.fragment().is_some();
    match parsed.hosts() {
        [host] if host.port().is_some() && !extra => Ok(host.to_string()),
        _ => Err(invalid_url(
            url,
            format!("give one server, as host:port; {shape}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_names_one_server_by_host_and_port() {
        assert_eq!(
            address("map://127.0.0.1:7070").ok(),
            Some("127.0.0.1:7070".into())
        );
        assert_eq!(address("MAP://[::1]:7070/").ok(), Some("[::1]:7070".into()));
        for bad in [
            "127.0.0.1:7070",
            "redis://127.0.0.1:7070",
            "map://127.0.0.1",
            "map://:7070",
            "map://a:1,b:2",
            "map://h:1/db",
            "map://user:secret@h:1",
        ] {
            let error = address(bad).expect_err(bad).to_string();
            assert!(error.contains("map://"), "{bad}: says the form: {error}");
            assert!(!error.contains("secret"), "never shows a password: {error}");
        }
    }
}
