//! [`Reopen`]: how a store opens itself again, on connections of its own,
//! for [`LockStore::reopen`](crate::LockStore::reopen).

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use crate::store::BoxFuture;
use crate::{LockStore, Result};

/// What a store was opened from (its URL, configuration, client), kept so
/// that [`LockStore::reopen`](crate::LockStore::reopen) can open it again.
///
/// A guard dropped as its runtime shuts down (a `#[tokio::main]` that
/// returns with a guard still bound) can no longer be given back through
/// the store's own connections: they run on that runtime. The runtime then
/// opens the store again with this, on a runtime and a thread of its own,
/// and gives the lease back through that.
///
#[cfg_attr(feature = "store-kit", doc = "```")]
#[cfg_attr(not(feature = "store-kit"), doc = "```ignore")]
/// use lock_core::MemoryStore;
/// use lock_core::store::kit::Reopen;
///
/// // A store opened from `url` keeps a way to open itself again.
/// let url = String::from("memory://");
/// let reopen = Reopen::new(move || {
///     let _url = url.clone();
///     async move { Ok(MemoryStore::new()) }
/// });
/// # drop(reopen);
/// ```
#[derive(Clone)]
pub struct Reopen(Arc<dyn Fn() -> Opening + Send + Sync>);

/// A store being opened again: what [`Reopen::open`] returns.
type Opening = BoxFuture<'static, Result<Arc<dyn LockStore>>>;

impl Reopen {
    /// Keeps `open`, which opens the store anew each time it is called.
    /// The future it returns must own what it needs (clones of the URL and
    /// configuration) and do nothing until polled.
    pub fn new<F, Fut, S>(open: F) -> Reopen
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<S>> + Send + 'static,
        S: LockStore,
    {
        Reopen(Arc::new(move || {
            let opening = open();
            Box::pin(async move { Ok(Arc::new(opening.await?) as Arc<dyn LockStore>) })
        }))
    }

    /// The future that opens the store again: what
    /// [`LockStore::reopen`](crate::LockStore::reopen) returns.
    pub fn open(&self) -> Opening {
        (self.0)()
    }
}

impl fmt::Debug for Reopen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Reopen")
    }
}
