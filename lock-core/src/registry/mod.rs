//! The application-wide registry: which [`LockManager`] locks use.
//!
//! `#[locked]` functions and library code that takes no manager argument ask
//! the registry for one. Resolution order, first match wins:
//!
//! 1. a task-local override set with [`with_manager`] (tests use it, so they
//!    never fight over globals);
//! 2. for [`manager_named`], the manager installed under that name with
//!    [`install_named`]; for [`manager`], the default one installed with
//!    [`install`];
//! 3. nothing: the lock fails with [`Error::NoManager`] (or
//!    [`Error::UnknownManager`] for a named one), whose message says what to
//!    install.
//!
//! # Nothing installed fails closed
//!
//! A lock library that quietly falls back to a per-process store breaks
//! exclusion exactly where it matters, and says so only in a log line
//! nobody reads:
//!
//! ```text
//! host a: starts, forgets registry::install, takes "nightly" in its own memory: runs the job
//! host b: starts, forgets registry::install, takes "nightly" in its own memory: runs the job
//! host c: ...                                                                   runs the job
//! ```
//!
//! So with nothing installed every lock fails, `#[locked]` calls included,
//! before the body runs. A per-process store is something an application
//! asks for, by installing one:
//!
//! - `registry::install(lock_core::connect(url).await?)?` for locks that
//!   exclude every process of the fleet;
//! - `registry::install(LockManager::memory())?` for an application that
//!   runs as one process: the memory store is then a choice written in
//!   `main`, where a reviewer sees it;
//! - [`with_manager`] in tests (see [the testing
//!   guide](crate::testing));
//! - `#[locked(manager = "process")]` for one lock meant to exclude this
//!   process's tasks only ([`PROCESS`]), written where the lock is.
//!
//! [`verify`] reports the missing manager at startup, listing the
//! functions that would fail.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
//! use lock_core::{registry, LockManager};
//!
//! // At startup, once:
//! registry::install(LockManager::memory().with_prefix("app:"))?;
//! assert_eq!(registry::manager().prefix(), "app:");
//!
//! // In a test, without touching the global:
//! let own = LockManager::memory().with_prefix("test:");
//! registry::with_manager(own, async {
//!     assert_eq!(registry::manager().prefix(), "test:");
//! })
//! .await;
//! # Ok(()) }
//! ```

mod declared;
mod problems;
mod verify;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{OnceLock, PoisonError, RwLock};

pub use self::declared::{DeclaredLock, declared};
pub use self::problems::{Problem, Problems};
pub use self::verify::verify;
/// Re-exported where `#[locked]`'s catalogue used to name it.
pub use crate::OnContended;
use crate::manager::installed;
use crate::{Error, LockManager, Result};

static NAMED: RwLock<Option<HashMap<String, LockManager>>> = RwLock::new(None);

/// The name of the manager every process has without installing one: a
/// memory manager of this process, for locks meant to exclude this
/// process's tasks only (`#[locked(manager = "process")]`,
/// `registry::manager_named("process")`).
///
/// The explicit form of what was once a silent fallback: written at the
/// lock, where a reviewer sees that it reaches no other process. It is
/// what a lock taken before anything can be installed uses, such as
/// `#[locked]` above `#[tokio::test]` (tests of one binary taking turns).
/// [`with_manager`] overrides it like any named manager;
/// [`install_named`] under this name replaces it.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::registry;
///
/// let locks = registry::manager_named(registry::PROCESS)?;
/// assert!(!locks.is_shared(), "this process only");
/// assert!(locks.lock("cache-rebuild", Duration::from_secs(60)).acquire().await?.is_some());
/// # Ok(()) }
/// ```
pub const PROCESS: &str = "process";

/// Installs the default manager, the one [`manager`] returns.
///
/// Call it once, at startup, before the first lock is taken. Until it is
/// called, locks on the default manager fail with [`Error::NoManager`].
///
/// # Errors
///
/// [`Error::AlreadyInstalled`] when a default manager is already installed:
/// the first one stays, so locks never switch stores mid-run.
pub fn install(manager: LockManager) -> Result<()> {
    // Bound now: a manager taken from `manager()` while nothing was
    // installed stands for the default itself, and would resolve to itself.
    installed::install(manager.bound()).map_err(|_| Error::AlreadyInstalled)
}

/// Installs a manager under `name`, for `#[locked(manager = "name")]` and
/// [`manager_named`].
///
/// # Errors
///
/// [`Error::NameTaken`] when a manager is already installed under `name`.
pub fn install_named(name: impl Into<String>, manager: LockManager) -> Result<()> {
    let name = name.into();
    let mut named = NAMED.write().unwrap_or_else(PoisonError::into_inner);
    let named = named.get_or_insert_with(HashMap::new);
    if named.contains_key(&name) {
        return Err(Error::NameTaken { name });
    }
    named.insert(name, manager.bound());
    Ok(())
}

/// The manager locks use: the task-local override, else the installed
/// default.
///
/// With neither, a manager that stands for the default manager to come:
/// every use resolves the one [`install`]ed by then. Until one is
/// installed, its locks fail with [`Error::NoManager`] (whose message says
/// what to install), and it is not [shared](LockManager::is_shared). So a
/// manager taken early, before `main` installs one (kept in a struct built
/// at startup, say), works once one is installed, and never quietly locks
/// one process only. Each [`LockManager::lock`] call binds its lock to the
/// manager installed at that moment.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> lock_core::Result<()> {
/// use std::time::Duration;
/// use lock_core::{registry, Error, LockManager};
///
/// let early = registry::manager(); // nothing installed yet
/// let refused = early.lock("nightly", Duration::from_secs(60)).acquire().await;
/// assert!(matches!(refused, Err(Error::NoManager { .. })));
///
/// registry::install(LockManager::memory().with_prefix("app:"))?;
/// let lock = early.lock("nightly", Duration::from_secs(60));
/// assert_eq!(lock.key(), "app:nightly", "the installed manager's");
/// assert!(lock.acquire().await?.is_some());
/// # Ok(()) }
/// ```
pub fn manager() -> LockManager {
    if let Some(manager) = installed::overridden() {
        return manager;
    }
    match installed::installed() {
        Some(manager) => manager.clone(),
        None => LockManager::installed_later(),
    }
}

/// Whether locks on the default manager would fail for want of one right
/// now: no override, nothing installed.
pub(crate) fn nothing_installed() -> bool {
    installed::overridden().is_none() && installed::installed().is_none()
}

/// The manager installed under `name` (or the task-local override, which wins
/// over every installed manager); for [`PROCESS`], with nothing installed
/// under it, this process's own memory manager.
///
/// # Errors
///
/// [`Error::UnknownManager`] when nothing is installed under `name`.
pub fn manager_named(name: &str) -> Result<LockManager> {
    if let Some(manager) = installed::overridden() {
        return Ok(manager);
    }
    let installed = NAMED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|named| named.get(name).cloned());
    match installed {
        Some(manager) => Ok(manager),
        None if name == PROCESS => Ok(process()),
        None => Err(Error::UnknownManager {
            name: name.to_owned(),
        }),
    }
}

/// The [`PROCESS`] manager, made on first use.
fn process() -> LockManager {
    static PROCESS_MANAGER: OnceLock<LockManager> = OnceLock::new();
    PROCESS_MANAGER.get_or_init(LockManager::memory).clone()
}

/// Runs `future` with `manager` overriding every installed manager, for the
/// current task only.
///
/// Inside, [`manager`] and [`manager_named`] return `manager`. Tasks spawned
/// from inside do not inherit the override (tokio's task-locals are not
/// inherited, and nothing else marks a task as spawned from a scope): wrap
/// their futures too, `tokio::spawn(registry::with_manager(manager, future))`,
/// or hand them the manager. With no default manager installed, a lock
/// taken in such a task fails with [`Error::NoManager`], saying that it runs
/// outside `with_manager`. [The testing guide](crate::testing) shows the
/// whole pattern.
pub fn with_manager<F: Future>(manager: LockManager, future: F) -> impl Future<Output = F::Output> {
    installed::scope(manager.bound(), future)
}
