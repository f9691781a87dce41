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
//! 3. for [`manager`] only, a per-process memory manager, announced once at
//!    WARN because its locks do not exclude other processes.
//!
//! The registry also keeps the catalogue of every `#[locked]` function the
//! binary declares ([`declared`]) and checks it against the installed
//! managers at boot ([`verify`]).
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
use crate::{Error, LockManager, Result};

tokio::task_local! {
    static OVERRIDE: LockManager;
}

static DEFAULT: OnceLock<LockManager> = OnceLock::new();
static FALLBACK: OnceLock<LockManager> = OnceLock::new();
static NAMED: RwLock<Option<HashMap<String, LockManager>>> = RwLock::new(None);

/// Installs the default manager, the one [`manager`] returns.
///
/// Call it once, at startup, before the first lock is taken.
///
/// # Errors
///
/// [`Error::AlreadyInstalled`] when a default manager is already installed:
/// the first one stays, so locks never switch stores mid-run.
pub fn install(manager: LockManager) -> Result<()> {
    DEFAULT.set(manager).map_err(|_| Error::AlreadyInstalled)
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
    named.insert(name, manager);
    Ok(())
}

/// The manager locks use: the task-local override, else the installed default,
/// else a per-process memory manager (with one WARN saying so).
pub fn manager() -> LockManager {
    if let Ok(manager) = OVERRIDE.try_with(LockManager::clone) {
        return manager;
    }
    if let Some(manager) = DEFAULT.get() {
        return manager.clone();
    }
    FALLBACK
        .get_or_init(|| {
            tracing::warn!(
                "no lock manager installed: using a per-process memory store, so locks exclude \
                 this process only; call lock_core::registry::install(manager) at startup"
            );
            LockManager::memory()
        })
        .clone()
}

/// Whether [`manager`] would return the per-process fallback right now: no
/// override, nothing installed.
pub(crate) fn default_is_fallback() -> bool {
    OVERRIDE.try_with(|_| ()).is_err() && DEFAULT.get().is_none()
}

/// The manager installed under `name` (or the task-local override, which wins
/// over every installed manager).
///
/// # Errors
///
/// [`Error::UnknownManager`] when nothing is installed under `name`.
pub fn manager_named(name: &str) -> Result<LockManager> {
    if let Ok(manager) = OVERRIDE.try_with(LockManager::clone) {
        return Ok(manager);
    }
    NAMED
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .and_then(|named| named.get(name).cloned())
        .ok_or_else(|| Error::UnknownManager {
            name: name.to_owned(),
        })
}

/// Runs `future` with `manager` overriding every installed manager, for the
/// current task only.
///
/// Inside, [`manager`] and [`manager_named`] return `manager`. Tasks spawned
/// from inside do not inherit the override; wrap their futures too.
pub fn with_manager<F: Future>(manager: LockManager, future: F) -> impl Future<Output = F::Output> {
    OVERRIDE.scope(manager, future)
}
