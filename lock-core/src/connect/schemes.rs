//! The one table from a URL's scheme to the store it names.
//!
//! Each store reads its own URLs in its own folder (`store/redis/url.rs`,
//! `store/postgres/url.rs`...), behind its cargo feature. This table is the
//! one place that says which schemes go to which store, and it is built
//! whatever the features: a scheme whose store is left out still finds its
//! entry, and the error names the feature to enable instead of calling the
//! scheme unknown.

use crate::store::BoxFuture;
use crate::store::kit::{invalid_url, scheme};
use crate::{ConnectOptions, Error, LockManager, Result};

/// How a store connects from a URL and the options: each store's
/// `store/<name>/url.rs` has one, `open`.
pub(super) type Open = for<'a> fn(&'a str, ConnectOptions) -> BoxFuture<'a, Result<LockManager>>;

/// A store URLs can name.
pub(super) struct Store {
    /// How messages name it.
    name: &'static str,
    /// The cargo feature of lock-core that builds it; `None`: always built.
    feature: Option<&'static str>,
    /// The schemes of its URLs, lowercase.
    schemes: &'static [&'static str],
    /// How one of its URLs connects; `None` when this build leaves it out.
    open: Option<Open>,
}

/// A [`Store`] entry for the store in `store/<module>/`, built with lock-core's
/// `feature`: its `url::open` when the feature is on, a note of the
/// feature to enable when it is off.
macro_rules! store {
    ($name:literal, feature = $feature:literal, $module:ident, [$($scheme:literal),+ $(,)?]) => {
        Store {
            name: $name,
            feature: Some($feature),
            schemes: &[$($scheme),+],
            #[cfg(feature = $feature)]
            open: Some(crate::store::$module::url::open),
            #[cfg(not(feature = $feature))]
            open: None,
        }
    };
}

/// Every store [`connect`](crate::connect) reaches, with the schemes it
/// takes: one entry per store. The docs of `connect` and the `locks`
/// tool's README (`lock-cli/README.md`) list the same schemes (a test
/// holds them to this table).
pub(super) const STORES: &[Store] = &[
    Store {
        name: "memory",
        feature: None,
        schemes: &["memory"],
        open: Some(crate::store::memory::url::open),
    },
    store!(
        "Redis",
        feature = "redis",
        redis,
        [
            "redis",
            "rediss",
            "redis+unix",
            "unix",
            "redis+cluster",
            "rediss+cluster",
            "redis+sentinel",
            "rediss+sentinel"
        ]
    ),
    store!(
        "memcached",
        feature = "memcached",
        memcached,
        ["memcache", "memcached", "memcaches"]
    ),
    store!(
        "PostgreSQL",
        feature = "postgres",
        postgres,
        ["postgres", "postgresql"]
    ),
    store!("etcd", feature = "etcd", etcd, ["etcd", "http", "https"]),
];

/// Every scheme with its store, in the table's order.
pub(super) fn schemes() -> impl Iterator<Item = (&'static str, &'static Store)> {
    STORES
        .iter()
        .flat_map(|store| store.schemes.iter().map(move |scheme| (*scheme, store)))
}

/// How to connect to the store `url` names; or why no store of this build
/// takes it.
pub(super) fn resolve(url: &str) -> Result<Open> {
    let Some((scheme, _)) = scheme(url) else {
        return Err(invalid_url(
            url,
            format!(
                "it has no scheme, like redis://, to say which store; {}",
                supported()
            ),
        ));
    };
    let Some((_, store)) = schemes().find(|(name, _)| *name == scheme) else {
        return Err(invalid_url(
            url,
            format!("no store takes `{scheme}://` URLs; {}", supported()),
        ));
    };
    store.open.ok_or_else(|| not_built(&scheme, store))
}

/// The error for a URL whose store this build leaves out.
fn not_built(scheme: &str, store: &Store) -> Error {
    Error::StoreNotBuilt {
        scheme: scheme.to_owned(),
        store: store.name,
        feature: store.feature.unwrap_or_default(),
    }
}

/// "use one of memory://, redis://, ...", and the features that would add
/// the rest.
fn supported() -> String {
    let listed = |built: bool| {
        schemes()
            .filter(move |(_, store)| store.open.is_some() == built)
            .map(|(scheme, _)| format!("{scheme}://"))
    };
    let mut text = format!(
        "use one this build of lock-core takes: {}",
        listed(true).collect::<Vec<_>>().join(", ")
    );
    let mut features: Vec<String> = Vec::new();
    for store in STORES.iter().filter(|store| store.open.is_none()) {
        if let Some(feature) = store.feature {
            let feature = format!("`{feature}`");
            if !features.contains(&feature) {
                features.push(feature);
            }
        }
    }
    if !features.is_empty() {
        text.push_str(&format!(
            " (its features {} add {})",
            features.join(", "),
            listed(false).collect::<Vec<_>>().join(", ")
        ));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scheme_names_one_store_and_is_written_as_it_is_matched() {
        let all: Vec<_> = schemes().collect();
        for (at, (scheme, _)) in all.iter().enumerate() {
            assert_eq!(
                *scheme,
                scheme.to_ascii_lowercase(),
                "schemes are matched lowercased"
            );
            assert!(
                all[..at].iter().all(|(earlier, _)| earlier != scheme),
                "`{scheme}` is in the table twice"
            );
        }
    }

    #[test]
    fn the_scheme_picks_the_store_whatever_its_case() {
        let store = |url: &str| {
            let (scheme, _) = scheme(url.trim()).expect("a scheme");
            schemes()
                .find(|(name, _)| *name == scheme)
                .map(|(_, store)| store.name)
        };
        assert_eq!(store("redis://127.0.0.1:6379"), Some("Redis"));
        assert_eq!(store("Redis+Sentinel://s1,s2/main"), Some("Redis"));
        assert_eq!(store("redis+cluster://a:1,b:2"), Some("Redis"));
        assert_eq!(store("memcached://cache"), Some("memcached"));
        assert_eq!(store("memcaches://cache"), Some("memcached"));
        assert_eq!(store("postgresql://app@db/app"), Some("PostgreSQL"));
        assert_eq!(store("https://etcd-1:2379"), Some("etcd"));
        assert_eq!(store("memory://"), Some("memory"));
        assert_eq!(store("ftp://host"), None);
    }

    // An operator who mistypes a URL must learn what to type instead, and
    // must not find the password on the screen or in the logs.
    #[test]
    fn an_unknown_scheme_lists_the_schemes_of_this_build_and_hides_the_password() {
        let Err(error) = resolve("ftp://admin:topsecret@host/") else {
            panic!("ftp:// is no store URL");
        };
        let text = error.to_string();
        assert!(matches!(error, Error::InvalidUrl { .. }), "{error:?}");
        assert!(!text.contains("topsecret"), "password shown: {text}");
        assert!(
            text.contains("ftp://admin:***@host/"),
            "the URL, redacted: {text}"
        );
        for (scheme, store) in schemes() {
            if store.open.is_some() {
                assert!(
                    text.contains(&format!(" {scheme}://")),
                    "{scheme} missing: {text}"
                );
            }
        }
        let Err(no_scheme) = resolve("127.0.0.1:6379") else {
            panic!("no scheme");
        };
        assert!(
            no_scheme.to_string().contains("no scheme, like redis://"),
            "{no_scheme}"
        );
    }

    // Every store's feature, off: the message names the feature, not an
    // "unknown scheme" that would send the reader looking for a typo.
    #[test]
    fn a_scheme_whose_store_is_left_out_names_the_feature_to_enable() {
        for (scheme, store) in schemes().filter(|(_, store)| store.feature.is_some()) {
            let error = not_built(scheme, store);
            let text = error.to_string();
            let feature = store.feature.unwrap_or_default();
            assert!(
                text.contains(&format!("enable lock-core's `{feature}` feature")),
                "{text}"
            );
            assert!(text.contains(&format!("`{scheme}://`")), "{text}");
            assert!(
                matches!(error, Error::StoreNotBuilt { feature: named, .. } if named == feature),
                "{error:?}"
            );
        }
    }

    // The same through the table, in a build without PostgreSQL
    // (`cargo test -p lock-core --no-default-features --lib`).
    #[cfg(not(feature = "postgres"))]
    #[test]
    fn a_postgres_url_in_a_build_without_postgres_names_the_postgres_feature() {
        let Err(error) = resolve("postgres://app:hunter2@db/app") else {
            panic!("no PostgreSQL store in this build");
        };
        assert!(
            matches!(
                &error,
                Error::StoreNotBuilt {
                    feature: "postgres",
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(!error.to_string().contains("hunter2"), "{error}");
        let Err(unknown) = resolve("ftp://host") else {
            panic!("ftp:// is no store URL");
        };
        assert!(
            unknown.to_string().contains("`postgres`"),
            "an unknown scheme's error names the features that add more: {unknown}"
        );
    }
}
