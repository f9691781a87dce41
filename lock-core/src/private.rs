//! What `#[locked]` expansions call. Not public API: names and signatures
//! here change whenever the attribute needs them to.
//!
//! The attribute emits as little code as it can and calls into this module
//! for everything else, so the runtime behaviour of a locked function is
//! ordinary Rust, tested here, rather than quoted tokens.

use std::time::Duration;

use crate::registry::{self, DeclaredLock};
use crate::{Error, LockGuard, LockManager, Result};

/// Re-exported so the expansion's `inventory::submit!` works without the
/// user depending on `inventory`.
pub use inventory;

/// The declared-lock record of one `#[locked]` function; `const` so it can
/// live in a link-time registration.
#[allow(clippy::too_many_arguments)]
pub const fn declare(
    name: &'static str,
    literal_name: Option<&'static str>,
    function: &'static str,
    ttl: Duration,
    wait: Duration,
    manager: Option<&'static str>,
    file: &'static str,
    line: u32,
) -> DeclaredLock {
    DeclaredLock {
        name,
        literal_name,
        function,
        ttl,
        wait,
        manager,
        file,
        line,
    }
}

/// The manager a locked function uses: the named one, or the default.
pub fn manager(named: Option<&str>) -> Result<LockManager> {
    match named {
        Some(name) => registry::manager_named(name),
        None => Ok(registry::manager()),
    }
}

/// Takes the lock for one call of a locked function: `Ok(None)` when
/// somebody else holds it for the whole `wait`.
pub async fn acquire(
    named: Option<&str>,
    name: impl Into<String>,
    ttl: Duration,
    wait: Duration,
) -> Result<Option<LockGuard>> {
    manager(named)?
        .lock(name, ttl)
        .wait_for(wait)
        .acquire()
        .await
}

/// Gives the lock back after the body returned. The body's result wins: a
/// failed release is logged, and the lease then ends at its TTL.
pub async fn release(guard: LockGuard) {
    let key = guard.key().to_owned();
    if let Err(error) = guard.release().await {
        tracing::warn!(
            %key,
            %error,
            "could not release the lock after the locked function returned; it ends at its ttl"
        );
    }
}

/// Converts a lock error into the locked function's error type.
///
/// Implemented for every `E: From<lock_core::Error>`; it exists so that a
/// missing conversion is reported in words that say what to do.
#[diagnostic::on_unimplemented(
    message = "#[locked] cannot return lock errors as `{Self}`: it does not implement `From<lock_core::Error>`",
    label = "lock errors (store unreachable, unknown manager, bad name) are returned through this type",
    note = "add `impl From<lock_core::Error> for {Self}`, or return `Result<T, lock_core::Error>` or a type that converts from it, such as `anyhow::Error` or `Box<dyn std::error::Error + Send + Sync>`"
)]
pub trait FromLockError: Sized {
    /// Wraps `error` as `Self`.
    fn from_lock_error(error: Error) -> Self;
}

impl<E: From<Error>> FromLockError for E {
    fn from_lock_error(error: Error) -> Self {
        E::from(error)
    }
}

/// The error type of a `Result`, named through a type alias such as
/// `io::Result<T>` whose error type the attribute cannot see.
pub trait ResultParts {
    /// The `E` of `Result<T, E>`.
    type Err;
}

impl<T, E> ResultParts for std::result::Result<T, E> {
    type Err = E;
}

/// The "fake return edge": never called (the expansion guards it with
/// `if false`); its type tells inference what the body returns.
pub fn fake_return<T>() -> T {
    unreachable!("#[locked] never calls its fake return edge")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct AppError(Error);

    impl From<Error> for AppError {
        fn from(error: Error) -> Self {
            AppError(error)
        }
    }

    // Named managers are how `manager = "x"` reaches its store; a missing one
    // must be an error that names the fix, not a silent fallback.
    #[tokio::test]
    async fn an_unknown_named_manager_is_an_error_not_the_default_manager() {
        let error = acquire(
            Some("private-tests-never-installed"),
            "jobs",
            Duration::from_secs(5),
            Duration::ZERO,
        )
        .await
        .expect_err("no manager of that name is installed");
        assert!(
            matches!(error, Error::UnknownManager { ref name } if name == "private-tests-never-installed"),
            "got {error:?}"
        );
    }

    // The override is what tests rely on; the expansion must go through it.
    #[tokio::test]
    async fn acquire_uses_the_task_local_manager_and_release_frees_it() {
        let locks = LockManager::memory();
        registry::with_manager(locks.clone(), async {
            let guard = acquire(None, "jobs", Duration::from_secs(5), Duration::ZERO)
                .await
                .expect("the memory store does not fail")
                .expect("nobody holds it");
            assert!(
                locks
                    .lock("jobs", Duration::from_secs(5))
                    .is_held()
                    .await
                    .expect("memory"),
                "the lock is taken in the override manager"
            );
            let again = acquire(None, "jobs", Duration::from_secs(5), Duration::ZERO)
                .await
                .expect("memory");
            assert!(again.is_none(), "a second caller is told it is held");
            release(guard).await;
            assert!(
                !locks
                    .lock("jobs", Duration::from_secs(5))
                    .is_held()
                    .await
                    .expect("memory"),
                "release frees it"
            );
        })
        .await;
    }

    // Lock errors reach users through their own error type.
    #[test]
    fn a_lock_error_converts_into_any_error_that_takes_it() {
        type AppResult<T> = std::result::Result<T, AppError>;
        let error = <<AppResult<u8> as ResultParts>::Err as FromLockError>::from_lock_error(
            Error::AlreadyInstalled,
        );
        assert!(matches!(error.0, Error::AlreadyInstalled), "wrapped as is");
        let boxed: Box<dyn std::error::Error + Send + Sync> =
            FromLockError::from_lock_error(Error::AlreadyInstalled);
        assert!(boxed.to_string().contains("already installed"), "{boxed}");
    }

    // The record must carry exactly what the attribute wrote.
    #[test]
    fn a_declaration_keeps_every_field() {
        let lock = declare(
            "jobs:{id}",
            None,
            "app::run",
            Duration::from_secs(30),
            Duration::from_secs(2),
            Some("billing"),
            "src/app.rs",
            7,
        );
        assert_eq!(lock.name(), "jobs:{id}", "template");
        assert_eq!(lock.literal_name(), None, "template has no literal name");
        assert_eq!(lock.function(), "app::run", "function");
        assert_eq!(lock.ttl(), Duration::from_secs(30), "ttl");
        assert_eq!(lock.wait(), Duration::from_secs(2), "wait");
        assert_eq!(lock.manager(), Some("billing"), "manager");
        assert_eq!((lock.file(), lock.line()), ("src/app.rs", 7), "location");
    }
}
