//! `memory://`: this process's memory store, from a URL.
//!
//! A URL names one place, wherever it is read: two parts of an application
//! configured with `redis://cache:6379` share that server's leases. So every
//! `memory://` in one process names the same store, and its locks exclude
//! each other as Redis's would, within this process only.

use std::sync::OnceLock;

use crate::store::BoxFuture;
use crate::store::kit::{invalid_url, scheme};
use crate::{ConnectOptions, LockManager, Result};

/// A manager over this process's memory store, the one every `memory://`
/// names, under the default prefix.
fn connect(url: &str) -> Result<LockManager> {
    static PROCESS: OnceLock<LockManager> = OnceLock::new();
    let rest = scheme(url).map_or(url, |(_, rest)| rest);
    if !rest.trim_end_matches('/').is_empty() {
        return Err(invalid_url(
            url,
            "a memory URL names this process's memory store and nothing else; write memory://",
        ));
    }
    Ok(PROCESS.get_or_init(LockManager::memory).clone())
}

/// Opens `memory://`: this store's entry in [`connect`](crate::connect)'s
/// table. The memory store has no settings.
pub(crate) fn open(url: &str, _: ConnectOptions) -> BoxFuture<'_, Result<LockManager>> {
    Box::pin(async move { connect(url) })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    // Two parts of one application configured with `memory://` must not
    // both get the lock, as they would not with a server URL.
    #[tokio::test]
    async fn every_memory_url_in_a_process_names_one_store() {
        let first = connect("memory://").expect("memory://");
        let second = connect("MEMORY:///").expect("any case, a trailing slash");
        let name = format!("memory-url-{:016x}", rand::random::<u64>());
        let guard = first
            .lock(&name, Duration::from_secs(30))
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        assert!(
            second
                .lock(&name, Duration::from_secs(30))
                .is_held()
                .await
                .expect("read"),
            "a lock taken through one memory:// manager is held in the other"
        );
        assert!(!second.is_shared(), "still per process");
        guard.release().await.expect("release");
    }

    #[test]
    fn a_memory_url_with_anything_after_the_scheme_is_refused() {
        let error = connect("memory://elsewhere").expect_err("a host");
        assert!(
            matches!(error, crate::Error::InvalidUrl { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("write memory://"), "{error}");
    }
}
