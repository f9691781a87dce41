//! [`LockManager`]: a store, a key prefix, and the factory for [`Lock`](crate::Lock)s.

use std::fmt;
use std::sync::Arc;

use crate::{Holder, LockStore, MemoryStore};

/// The prefix every key gets unless [`LockManager::with_prefix`] says otherwise.
pub const DEFAULT_PREFIX: &str = "lock:";

/// Hands out [`Lock`](crate::Lock)s over one store, under one key prefix.
///
/// Cheap to clone: clones share the store. Build one at startup and install it
/// with [`registry::install`](crate::registry::install) so `#[locked]`
/// functions use it, or keep it and call [`lock`](LockManager::lock) yourself.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::LockManager;
///
/// let locks = LockManager::memory().with_prefix("billing:");
/// let lock = locks.lock("invoice-run", Duration::from_secs(600));
/// assert_eq!(lock.key(), "billing:invoice-run");
///
/// let ran = lock.run(async { Ok::<_, lock_core::Error>("sent") }).await?;
/// assert_eq!(ran, Some("sent"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockManager {
    store: Arc<dyn LockStore>,
    prefix: Arc<str>,
    declared_shared: bool,
}

impl LockManager {
    /// A manager over `store`, with the default prefix `"lock:"`.
    pub fn new(store: impl LockStore) -> LockManager {
        LockManager {
            store: Arc::new(store),
            prefix: Arc::from(DEFAULT_PREFIX),
            declared_shared: false,
        }
    }

    /// A manager over a fresh in-process [`MemoryStore`].
    ///
    /// Its locks exclude tasks and threads of this process only; see
    /// [`is_shared`](LockManager::is_shared).
    pub fn memory() -> LockManager {
        LockManager::new(MemoryStore::new())
    }

    /// The same manager with every key prefixed by `prefix` instead of `"lock:"`.
    ///
    /// Use one prefix per application sharing a store, so their lock names
    /// cannot collide.
    #[must_use = "with_prefix returns a new manager and leaves this one unchanged"]
    pub fn with_prefix(self, prefix: impl Into<String>) -> Self {
        LockManager {
            prefix: Arc::from(prefix.into()),
            ..self
        }
    }

    /// The same manager, vouching that its store is shared across processes
    /// even though the store does not say so itself.
    ///
    /// Only for setups the library cannot see: for example a memory store in
    /// an application that is guaranteed to run as a single process.
    #[must_use = "declared_shared returns a new manager and leaves this one unchanged"]
    pub fn declared_shared(self) -> Self {
        LockManager {
            declared_shared: true,
            ..self
        }
    }

    /// True when this manager's locks exclude other processes too: the store
    /// is shared (and atomic), or the manager was [declared
    /// shared](LockManager::declared_shared).
    ///
    /// A memory manager says `false`: two processes each get the lock.
    pub fn is_shared(&self) -> bool {
        self.declared_shared || self.store.is_shared()
    }

    // `lock`, the factory for locks, is defined in lock.rs, beside what it
    // builds: a lock holds its manager, so this module stays below that one.

    /// The locks held right now under this manager's prefix: each name
    /// (without the prefix) with its holder, sorted by name.
    ///
    /// For operators and dashboards (the `locks list` command is this call).
    /// What it costs and how consistent it is depends on the store (see
    /// [`LockStore::list`]):
    ///
    /// - memory reads each shard under its lock;
    /// - PostgreSQL runs one `SELECT`: a snapshot;
    /// - etcd makes one ranged read, in pages of 1,000 pinned to one
    ///   revision (a snapshot), then one lease read per lock;
    /// - Redis walks the keyspace with `SCAN MATCH` in batches of 1,000 keys
    ///   on every primary (never `KEYS`), then reads each lock's holder: not
    ///   a snapshot, so a lock taken or released during the walk may be
    ///   missing or shown stale;
    /// - memcached keeps no index of its keys and cannot list.
    ///
    /// A name's readers are listed one entry each
    /// ([`Holder::is_reader`]). Locks whose holder's lease has run out are
    /// never shown.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
    /// use std::time::Duration;
    /// use lock_core::LockManager;
    ///
    /// let locks = LockManager::memory().with_prefix("billing:");
    /// let _guard = locks.lock("invoice-run", Duration::from_secs(60)).acquire().await?;
    /// let held = locks.list().await?;
    /// assert_eq!(held.len(), 1);
    /// assert_eq!(held[0].0, "invoice-run");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`](crate::Error::Unsupported) for a store that
    /// cannot list (memcached); [`Error::Store`](crate::Error::Store) when the
    /// store fails.
    pub async fn list(&self) -> crate::Result<Vec<(String, Holder)>> {
        let mut held: Vec<(String, Holder)> = self
            .store
            .list(&self.prefix)
            .await?
            .into_iter()
            .filter_map(|(key, holder)| {
                // A store's listing is by key prefix; an empty name is not
                // a lock this manager could have taken.
                let name = key.strip_prefix(&*self.prefix)?;
                (!name.is_empty()).then(|| (name.to_owned(), holder))
            })
            .collect();
        held.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(held)
    }

    /// The store this manager works on.
    pub fn store(&self) -> &Arc<dyn LockStore> {
        &self.store
    }

    /// The prefix put before every lock name to make its key.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The prefix, shared: its allocation identifies it while it is held.
    pub(crate) fn shared_prefix(&self) -> &Arc<str> {
        &self.prefix
    }
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("prefix", &self.prefix)
            .field("shared", &self.is_shared())
            .finish_non_exhaustive()
    }
}
