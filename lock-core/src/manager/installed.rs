//! Where the registry keeps the managers it hands out: the installed
//! default, the task-local override of
//! [`registry::with_manager`](crate::registry::with_manager), and the
//! placeholder store of a manager taken while nothing was installed.
//!
//! It lives below [`LockManager`] rather than in the registry because a
//! manager taken from [`registry::manager`](crate::registry::manager) before
//! anything was installed resolves the installed default at each use: the
//! manager reads this slot, and the registry writes it.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::store::{AcquireRequest, Attempt, BoxFuture, LockStore};
use crate::{Error, Holder, LockManager, Result};

/// The default manager, set once by `registry::install`.
static DEFAULT: OnceLock<LockManager> = OnceLock::new();

/// How many `with_manager` scopes exist in this process right now, in any
/// task: a task without an override while this is above zero was most
/// likely spawned from inside one, and its error says so.
static OVERRIDES: AtomicUsize = AtomicUsize::new(0);

tokio::task_local! {
    static OVERRIDE: Override;
}

/// A task-local override: the manager, and its place in [`OVERRIDES`] for
/// as long as the scope's future exists.
struct Override {
    manager: LockManager,
    _counted: Counted,
}

/// One scope counted in [`OVERRIDES`] until dropped.
struct Counted;

impl Counted {
    fn new() -> Counted {
        OVERRIDES.fetch_add(1, Ordering::Relaxed);
        Counted
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        OVERRIDES.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Sets the default manager; `Err` when one is set already.
pub(crate) fn install(manager: LockManager) -> std::result::Result<(), LockManager> {
    DEFAULT.set(manager)
}

/// The installed default manager, if any.
pub(crate) fn installed() -> Option<&'static LockManager> {
    DEFAULT.get()
}

/// The current task's override, if it runs inside `with_manager`.
pub(crate) fn overridden() -> Option<LockManager> {
    OVERRIDE.try_with(|scope| scope.manager.clone()).ok()
}

/// Whether the current task runs inside `with_manager`.
pub(crate) fn in_override() -> bool {
    OVERRIDE.try_with(|_| ()).is_ok()
}

/// Runs `future` with `manager` as the current task's override.
pub(crate) fn scope<F: std::future::Future>(
    manager: LockManager,
    future: F,
) -> impl std::future::Future<Output = F::Output> {
    let scope = Override {
        manager,
        _counted: Counted::new(),
    };
    OVERRIDE.scope(scope, future)
}

/// The error for a lock on `key` that has no manager to take it in, with
/// the fix that fits where the call was made.
#[cold]
pub(crate) fn no_manager(key: &str) -> Error {
    let reason = if in_override() {
        "this manager was taken from `registry::manager()` outside `registry::with_manager` \
         while nothing was installed, so it stands for the default manager, not for the \
         override this task runs in, and no default manager is installed; call \
         `registry::manager()` inside the `with_manager` scope"
    } else if OVERRIDES.load(Ordering::Relaxed) > 0 {
        "this task runs outside registry::with_manager (a spawned task does not inherit it): \
         other tasks of this process run inside one, and no default manager is installed; \
         wrap the spawned future too, \
         `tokio::spawn(registry::with_manager(manager, future))`, with `manager` taken from \
         `registry::manager()` inside the scope, or hand the task that manager"
    } else {
        "none is installed, and locks fail rather than exclude this process only; install one \
         at startup, `registry::install(lock_core::connect(url).await?)?` for locks that \
         exclude every process of the fleet, or `registry::install(LockManager::memory())?` \
         for locks within this one process; in a test, run the code inside \
         `registry::with_manager(LockManager::memory(), ..)`; a lock meant for this process \
         only can say so where it is taken: `#[locked(manager = \"process\")]`"
    };
    Error::NoManager {
        key: key.to_owned(),
        reason,
    }
}

/// The store of a manager with no store to work on: taken from
/// `registry::manager()` while nothing was installed. Every call fails with
/// [`Error::NoManager`]; what it reports of itself lets every other check
/// pass, so that `NoManager` is the error a lock on it gets.
pub(crate) struct Unbound;

/// The shared placeholder store.
pub(crate) fn unbound() -> &'static std::sync::Arc<dyn LockStore> {
    static UNBOUND: OnceLock<std::sync::Arc<dyn LockStore>> = OnceLock::new();
    UNBOUND.get_or_init(|| std::sync::Arc::new(Unbound))
}

/// A future that fails at once with the error for `key`, made now, in the
/// caller's task.
fn fail<'a, T: Send + 'a>(key: &str) -> BoxFuture<'a, Result<T>> {
    let error = no_manager(key);
    Box::pin(std::future::ready(Err(error)))
}

impl LockStore for Unbound {
    fn acquire<'a>(&'a self, request: AcquireRequest<'a>) -> BoxFuture<'a, Result<Attempt>> {
        fail(request.key)
    }

    fn release<'a>(&'a self, key: &'a str, _token: &'a str) -> BoxFuture<'a, Result<bool>> {
        fail(key)
    }

    fn extend<'a>(
        &'a self,
        key: &'a str,
        _token: &'a str,
        _ttl: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        fail(key)
    }

    fn force_release<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<bool>> {
        fail(key)
    }

    fn holder<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Holder>>> {
        fail(key)
    }

    fn is_held_by<'a>(&'a self, key: &'a str, _token: &'a str) -> BoxFuture<'a, Result<bool>> {
        fail(key)
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<(String, Holder)>>> {
        fail(prefix)
    }

    fn name(&self) -> &'static str {
        "none"
    }

    fn is_shared(&self) -> bool {
        false
    }

    fn max_ttl(&self) -> Duration {
        Duration::MAX
    }

    fn fencing(&self) -> bool {
        true
    }

    fn read_mode(&self) -> bool {
        true
    }
}
