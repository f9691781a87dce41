//! A rustls client configuration that follows its files: each new
//! connection asks for it, and when a certificate or key file has changed
//! since it was read (a rotated certificate), it is read again. So a store
//! that runs for longer than its client certificate lives keeps connecting
//! once the file is renewed.

use std::sync::{Arc, Mutex, PoisonError};

use rustls::ClientConfig;

use super::{Stamp, Tls};

/// How a configuration is built from a [`Tls`].
type Build = Box<dyn Fn(&Tls) -> Result<ClientConfig, String> + Send + Sync>;

/// The configuration, built again when its files change.
pub(crate) struct Reloading {
    tls: Tls,
    build: Build,
    current: Mutex<(Stamp, Arc<ClientConfig>)>,
}

impl Reloading {
    /// Built now with `build` (so that unusable files fail the store's
    /// connect), and again by [`config`](Reloading::config) after a change.
    pub(crate) fn new(
        tls: Tls,
        build: impl Fn(&Tls) -> Result<ClientConfig, String> + Send + Sync + 'static,
    ) -> Result<Reloading, String> {
        let stamp = tls.stamp();
        let config = Arc::new(build(&tls)?);
        Ok(Reloading {
            tls,
            build: Box::new(build),
            current: Mutex::new((stamp, config)),
        })
    }

    /// The configuration for a new connection: read again if a file
    /// changed since. Files that cannot be used now (a certificate renewed
    /// before its key, say) leave the last good configuration in use until
    /// they change again. The files are read outside the lock, so other
    /// connections opening meanwhile are not held up.
    pub(crate) fn config(&self) -> Arc<ClientConfig> {
        let stamp = self.tls.stamp();
        {
            let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
            if current.0 == stamp {
                return Arc::clone(&current.1);
            }
        }
        let built = (self.build)(&self.tls);
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match built {
            Ok(config) => *current = (stamp, Arc::new(config)),
            Err(error) => {
                tracing::warn!(
                    %error,
                    "a TLS certificate or key file changed but cannot be used; connecting with the ones read before until it changes again"
                );
                // Not read again until it changes again.
                current.0 = stamp;
            }
        }
        Arc::clone(&current.1)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    // A renewal that cannot be used is tried once, not at every
    // connection after it.
    #[test]
    fn files_that_cannot_be_used_are_read_once_per_change() {
        let dir = std::env::temp_dir().join(format!("lock-reload-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "good").expect("write");
        let builds = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&builds);
        let reloading = Reloading::new(Tls::new().ca_file(&ca), move |tls| {
            counted.fetch_add(1, Ordering::SeqCst);
            let pem = tls.ca_bytes()?.unwrap_or_default();
            if pem.starts_with(b"bad") {
                return Err("unusable".to_owned());
            }
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map(|builder| {
                    builder
                        .with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth()
                })
                .map_err(|e| e.to_string())
        })
        .expect("built");
        let good = reloading.config();
        std::fs::write(&ca, "bad, half written").expect("write");
        for _ in 0..3 {
            assert!(Arc::ptr_eq(&good, &reloading.config()), "the last good one");
        }
        assert_eq!(
            builds.load(Ordering::SeqCst),
            2,
            "built at start, and once for the change"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_changed_file_is_read_again_and_an_unchanged_one_is_not() {
        let dir = std::env::temp_dir().join(format!("lock-reload-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).expect("dir");
        let ca = dir.join("ca.pem");
        std::fs::write(&ca, "first").expect("write");
        let builds = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&builds);
        let reloading = Reloading::new(Tls::new().ca_file(&ca), move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map(|builder| {
                    builder
                        .with_root_certificates(rustls::RootCertStore::empty())
                        .with_no_client_auth()
                })
                .map_err(|e| e.to_string())
        })
        .expect("built");
        let first = reloading.config();
        let again = reloading.config();
        assert!(Arc::ptr_eq(&first, &again), "nothing changed, nothing read");
        assert_eq!(builds.load(Ordering::SeqCst), 1);
        // A rotation: another length, whatever the clock's resolution.
        std::fs::write(&ca, "second, renewed").expect("write");
        let renewed = reloading.config();
        assert!(!Arc::ptr_eq(&first, &renewed), "read again");
        assert_eq!(builds.load(Ordering::SeqCst), 2);
        // Renewed keeping its length and its time of change (cp -p): the
        // file is another (its change time, or its inode) all the same.
        let modified = std::fs::metadata(&ca)
            .and_then(|m| m.modified())
            .expect("mtime");
        std::fs::write(&ca, "SECOND, renewed").expect("write");
        std::fs::File::options()
            .write(true)
            .open(&ca)
            .and_then(|file| file.set_modified(modified))
            .expect("set the time of change back");
        let same_size = reloading.config();
        assert!(!Arc::ptr_eq(&renewed, &same_size), "read again");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
