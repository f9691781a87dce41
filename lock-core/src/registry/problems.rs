//! What [`verify`](super::verify) reports: each [`Problem`] with the fix in its
//! message, and [`Problems`], all of them from one check.

use super::declared::DeclaredLock;

/// One problem [`verify`](super::verify) found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Problem {
    /// A function names a manager that is not installed: each call would fail
    /// with [`Error::UnknownManager`](crate::Error::UnknownManager).
    ManagerNotInstalled {
        /// The declaration naming the manager.
        lock: &'static DeclaredLock,
    },
    /// No default manager is installed, so each call of the functions that
    /// use it would fail with [`Error::NoManager`](crate::Error::NoManager).
    NoManagerInstalled {
        /// The declarations that use the default manager.
        declarations: Vec<&'static DeclaredLock>,
    },
    /// A function declared `shared` uses a manager whose store is
    /// per-process: each call would fail with [`Error::NotShared`](crate::Error::NotShared).
    NotShared {
        /// The `shared` declaration.
        lock: &'static DeclaredLock,
    },
    /// A function declared `read` uses a manager whose store keeps no
    /// readers ([`LockStore::read_mode`](crate::LockStore::read_mode) is
    /// false): each call would fail with
    /// [`Error::ReadUnsupported`](crate::Error::ReadUnsupported).
    ReadUnsupported {
        /// The `read` declaration.
        lock: &'static DeclaredLock,
    },
    /// Several functions declare the same literal lock name (on the same
    /// manager) with different TTLs, so the lease's length depends on which
    /// one runs.
    ConflictingTtl {
        /// The lock name.
        name: &'static str,
        /// Every declaration of that name on that manager, by file and line.
        declarations: Vec<&'static DeclaredLock>,
    },
    /// Several functions declare the same lock name (on the same manager)
    /// with different `permits`, so how many may hold it at once depends
    /// on which one runs.
    ConflictingPermits {
        /// The lock name, as written.
        name: &'static str,
        /// Every declaration of that name on that manager, by file and line.
        declarations: Vec<&'static DeclaredLock>,
    },
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::ManagerNotInstalled { lock } => {
                let manager = lock.manager.unwrap_or_default();
                write!(
                    f,
                    "`{}` ({}:{}) uses the lock manager `{manager}`, which is not installed; \
                     call `lock_core::registry::install_named(\"{manager}\", manager)` at startup",
                    lock.function, lock.file, lock.line
                )
            }
            Problem::NoManagerInstalled { declarations } => {
                write!(
                    f,
                    "no default lock manager is installed, and {} declared lock(s) use it (",
                    declarations.len()
                )?;
                for (index, lock) in declarations.iter().take(3).enumerate() {
                    let sep = if index == 0 { "" } else { ", " };
                    write!(f, "{sep}`{}` at {}:{}", lock.function, lock.file, lock.line)?;
                }
                if declarations.len() > 3 {
                    write!(f, ", ...")?;
                }
                write!(
                    f,
                    "), so each of their calls would fail with `NoManager`; call \
                     `registry::install(lock_core::connect(url).await?)?` at startup for locks \
                     that exclude every process of the fleet, or \
                     `registry::install(LockManager::memory())?` for locks within this one process"
                )
            }
            Problem::NotShared { lock } => {
                let (manager, install) = manager_and_install(lock);
                write!(
                    f,
                    "`{}` ({}:{}) is declared `shared`, but {manager} keeps its locks in this \
                     process only, so every call would fail with `NotShared`; install a manager \
                     over a shared store (such as Redis) with {install} at startup, or use \
                     `declared_shared()` if the application truly runs as one process",
                    lock.function, lock.file, lock.line
                )
            }
            Problem::ReadUnsupported { lock } => {
                let (manager, install) = manager_and_install(lock);
                write!(
                    f,
                    "`{}` ({}:{}) is declared `read`, but the store of {manager} keeps no \
                     readers, so every call would fail with `ReadUnsupported`; install a \
                     manager over a store that keeps readers with {install} at startup, or \
                     drop `read` to take the plain lock",
                    lock.function, lock.file, lock.line
                )
            }
            Problem::ConflictingTtl { name, declarations } => {
                write!(f, "the lock `{name}` is declared with different ttls:")?;
                for lock in declarations {
                    write!(
                        f,
                        " {:?} in `{}` ({}:{});",
                        lock.ttl, lock.function, lock.file, lock.line
                    )?;
                }
                write!(
                    f,
                    " one lock needs one ttl: make them equal, or give the locks different names"
                )
            }
            Problem::ConflictingPermits { name, declarations } => {
                write!(f, "the lock `{name}` is declared with different permits:")?;
                for lock in declarations {
                    write!(
                        f,
                        " {} in `{}` ({}:{});",
                        lock.options.permits, lock.function, lock.file, lock.line
                    )?;
                }
                write!(
                    f,
                    " one lock admits one number of holders: make them equal, or give the locks different names"
                )
            }
        }
    }
}

/// How a problem names the manager `lock` uses, and the call that installs
/// it.
fn manager_and_install(lock: &DeclaredLock) -> (String, String) {
    match lock.manager {
        Some(name) => (
            format!("the lock manager `{name}`"),
            format!("`lock_core::registry::install_named(\"{name}\", manager)`"),
        ),
        None => (
            "the default lock manager".to_owned(),
            "`lock_core::registry::install(manager)`".to_owned(),
        ),
    }
}

/// Every problem [`verify`](super::verify) found; displays one per line.
#[derive(Debug)]
pub struct Problems(pub(super) Vec<Problem>);

impl Problems {
    /// The problems, in declaration order.
    pub fn iter(&self) -> std::slice::Iter<'_, Problem> {
        self.0.iter()
    }

    /// How many problems were found (at least one).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: [`verify`](super::verify) returns `Ok` when there is no problem.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'a> IntoIterator for &'a Problems {
    type Item = &'a Problem;
    type IntoIter = std::slice::Iter<'a, Problem>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl std::fmt::Display for Problems {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} problem(s) with the declared locks:", self.0.len())?;
        for problem in &self.0 {
            write!(f, "\n- {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Problems {}
