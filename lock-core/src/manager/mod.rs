//! [`LockManager`]: a store, a key prefix, and the factory for [`Lock`](crate::Lock)s.

pub(crate) mod installed;

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
    source: Source,
}

/// Where a manager's store (and, unless it has one of its own, its prefix)
/// comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Source {
    /// Its own `store`.
    Own,
    /// The default manager installed with `registry::install`, read at each
    /// use: what `registry::manager()` returns while nothing is installed.
    /// `store` is then the placeholder that fails every call. `own_prefix`
    /// when [`LockManager::with_prefix`] gave it a prefix of its own.
    Installed { own_prefix: bool },
    /// No store at all: a lock built from an `Installed` manager while
    /// nothing was installed. `store` is the placeholder, and every lock
    /// fails with `Error::NoManager`.
    Nothing,
}

impl LockManager {
    /// A manager over `store`, with the default prefix `"lock:"`.
    pub fn new(store: impl LockStore) -> LockManager {
        LockManager {
            store: Arc::new(store),
            prefix: Arc::from(DEFAULT_PREFIX),
            declared_shared: false,
            source: Source::Own,
        }
    }

    /// The manager `registry::manager()` returns while nothing is
    /// installed: it stands for the default manager to come, resolved at
    /// each use, and fails every lock with `Error::NoManager` until then.
    pub(crate) fn installed_later() -> LockManager {
        LockManager {
            store: Arc::clone(installed::unbound()),
            prefix: Arc::from(DEFAULT_PREFIX),
            declared_shared: false,
            source: Source::Installed { own_prefix: false },
        }
    }

    /// The installed default manager this one stands for, when it stands
    /// for one and one is installed now.
    fn resolved(&self) -> Option<&'static LockManager> {
        match self.source {
            Source::Installed { .. } => installed::installed(),
            Source::Own | Source::Nothing => None,
        }
    }

    /// The manager a lock built now works on: this one, or for a manager
    /// that stands for the installed default, that default (with this
    /// manager's own prefix and `declared_shared`, if it was given them),
    /// or no store at all while nothing is installed.
    pub(crate) fn bound(&self) -> LockManager {
        let Source::Installed { own_prefix } = self.source else {
            return self.clone();
        };
        match installed::installed() {
            // Installed managers are bound when installed, never `Installed`.
            Some(default) => {
                let default = default.clone();
                LockManager {
                    prefix: if own_prefix {
                        Arc::clone(&self.prefix)
                    } else {
                        default.prefix
                    },
                    declared_shared: self.declared_shared || default.declared_shared,
                    ..default
                }
            }
            None => LockManager {
                source: Source::Nothing,
                ..self.clone()
            },
        }
    }

    /// Whether this manager has no store to work on: its locks fail with
    /// `Error::NoManager`.
    pub(crate) fn is_unbound(&self) -> bool {
        self.source == Source::Nothing
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
        let source = match self.source {
            Source::Installed { .. } => Source::Installed { own_prefix: true },
            source => source,
        };
        LockManager {
            prefix: Arc::from(prefix.into()),
            source,
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
    /// A memory manager says `false`: two processes each get the lock. So
    /// does the manager [`registry::manager`](crate::registry::manager)
    /// returns while nothing is installed, whose locks fail.
    pub fn is_shared(&self) -> bool {
        self.declared_shared
            || self.resolved().is_some_and(LockManager::is_shared)
            || self.store.is_shared()
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
        let manager = self.bound();
        let mut held: Vec<(String, Holder)> = manager
            .store
            .list(&manager.prefix)
            .await?
            .into_iter()
            .filter_map(|(key, holder)| {
                // A store's listing is by key prefix; an empty name is not
                // a lock this manager could have taken.
                let name = key.strip_prefix(&*manager.prefix)?;
                (!name.is_empty()).then(|| (name.to_owned(), holder))
            })
            .collect();
        held.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(held)
    }

    /// The store this manager works on.
    ///
    /// For the manager [`registry::manager`](crate::registry::manager)
    /// returns while nothing is installed: the installed default's store
    /// once one is installed, and until then a placeholder named `"none"`
    /// that fails every call with [`Error::NoManager`](crate::Error::NoManager).
    pub fn store(&self) -> &Arc<dyn LockStore> {
        self.resolved().map_or(&self.store, LockManager::store)
    }

    /// The prefix put before every lock name to make its key.
    ///
    /// For the manager [`registry::manager`](crate::registry::manager)
    /// returns while nothing is installed, and not given a prefix of its
    /// own: the installed default's prefix once one is installed.
    pub fn prefix(&self) -> &str {
        match (self.source, self.resolved()) {
            (Source::Installed { own_prefix: false }, Some(default)) => default.prefix(),
            _ => &self.prefix,
        }
    }

    /// The prefix, shared: its allocation identifies it while it is held.
    pub(crate) fn shared_prefix(&self) -> &Arc<str> {
        &self.prefix
    }
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("prefix", &self.prefix())
            .field("store", &self.store().name())
            .field("shared", &self.is_shared())
            .finish_non_exhaustive()
    }
}
