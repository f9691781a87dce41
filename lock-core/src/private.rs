//! What `#[locked]` expansions call. Not public API: names and signatures
//! here change whenever the attribute needs them to.
//!
//! The attribute emits as little code as it can and calls into this module
//! for everything else, so the runtime behaviour of a locked function is
//! ordinary Rust, tested here, rather than quoted tokens.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::metrics;
use crate::registry::{self, DeclaredLock};
use crate::{Error, Lock, LockManager, LockOptions, Result};

/// Re-exported so the expansion's `inventory::submit!` works without the
/// user depending on `inventory`.
pub use inventory;

/// Present in the lock-core every `#[locked]` of lock-macros 0.1 expands
/// against. An expansion names it, so a lock-macros of another version
/// (whose expansion may call into this module differently) fails to compile,
/// naming this constant, instead of misbehaving: use the lock-macros that
/// lock-core re-exports (`lock_core::locked`).
pub const LOCK_MACROS_0_1: () = ();

/// The metric updates one uncontended acquire+release makes, with no I/O:
/// for the benchmark's "cost of metrics per pair" figure. `since` stands
/// for the reading the acquire makes anyway. Nothing without the `metrics`
/// feature.
pub fn metrics_of_one_pair(label: &'static str, store: &'static str, since: std::time::Instant) {
    // What a pair adds: the labels, the updates, and two clock readings (the
    // wait's end and the hold's end).
    let since = tokio::time::Instant::from_std(since);
    let labels = metrics::Labels::of(Some(label), store);
    metrics::taken(labels);
    metrics::acquisition(labels, Some(true), since);
    metrics::let_go(labels, since);
}

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
    options: LockOptions,
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
        options,
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

/// The lock for one call of a locked function, with the options its
/// attribute wrote.
pub fn lock(
    named: Option<&str>,
    name: impl AsRef<str>,
    ttl: Duration,
    wait: Duration,
    options: LockOptions,
) -> Result<Lock> {
    Ok(manager(named)?
        .lock(name, ttl)
        .wait_for(wait)
        .with_options(options))
}

/// Why a locked call whose body returns `Result<T, E>` failed: the body's
/// own error, or a lock error the expansion converts into `E`.
///
/// Keeping the two apart lets the expansion do the conversion itself, at
/// the span of the declared error type, so a missing `From<lock_core::Error>`
/// is reported there in [`FromLockError`]'s words.
#[derive(Debug)]
pub enum Failure<E> {
    /// The body returned `Err`.
    Work(E),
    /// Taking, keeping or giving back the lock failed, or (with
    /// [`run_or_contended`]) somebody else held it.
    Lock(Error),
}

impl<E> From<Error> for Failure<E> {
    fn from(error: Error) -> Self {
        Failure::Lock(error)
    }
}

/// Runs the body of a locked function returning `Result<T, E>` under
/// `lock`, with [`Lock::run`]: `Ok(None)` when somebody else held it.
///
/// Like every runner here, a plain function that boxes the body at once: the
/// body's future is held in exactly one place for the whole call, so a
/// locked function's future is its own arguments plus a small constant,
/// however large its body and however deeply locked calls nest.
pub fn run<T, E, F>(
    lock: Result<Lock>,
    work: F,
) -> impl Future<Output = std::result::Result<Option<T>, Failure<E>>>
where
    F: Future<Output = std::result::Result<T, E>>,
{
    let work = WorkError(Box::pin(work));
    async move { lock?.run_unpin(work).await }
}

/// Runs the body of a `contended = "error"` function under `lock`, with
/// [`Lock::run_or_contended`]: contention is `Failure::Lock(Error::Contended)`.
pub fn run_or_contended<T, E, F>(
    lock: Result<Lock>,
    work: F,
) -> impl Future<Output = std::result::Result<T, Failure<E>>>
where
    F: Future<Output = std::result::Result<T, E>>,
{
    let work = WorkError(Box::pin(work));
    async move { lock?.run_or_contended_unpin(work).await }
}

/// Runs the body of a locked function returning a plain `T` under `lock`,
/// with [`Lock::run`]; lock errors come back as they are.
pub fn run_plain<T, F>(lock: Result<Lock>, work: F) -> impl Future<Output = Result<Option<T>>>
where
    F: Future<Output = T>,
{
    let work = Infallible(Box::pin(work));
    async move { lock?.run_unpin(work).await }
}

/// The boxed body of a `Result` function, its error marked as the body's own.
struct WorkError<F>(Pin<Box<F>>);

impl<T, E, F: Future<Output = std::result::Result<T, E>>> Future for WorkError<F> {
    type Output = std::result::Result<T, Failure<E>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0
            .as_mut()
            .poll(cx)
            .map(|out| out.map_err(Failure::Work))
    }
}

/// The boxed body of a function returning a plain `T`, which cannot fail.
struct Infallible<F>(Pin<Box<F>>);

impl<F: Future> Future for Infallible<F> {
    type Output = Result<F::Output>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.as_mut().poll(cx).map(Ok)
    }
}

/// Converts a lock error into the locked function's error type.
///
/// Implemented for every `E: From<lock_core::Error>`; it exists so that a
/// missing conversion is reported in words that say what to do.
#[diagnostic::on_unimplemented(
    message = "#[locked] cannot return lock errors as `{Self}`: it does not implement `From<lock_core::Error>`",
    label = "lock errors (store unreachable, unknown manager, bad name) are returned through this type",
    note = "if `{Self}` is defined in this crate, add `impl From<lock_core::Error> for {Self}`; if it comes from another crate (where no such impl can be added), return an error type of your own that wraps both, or one that converts from lock errors already: `lock_core::Error`, `std::io::Error`, `anyhow::Error`, `Box<dyn std::error::Error + Send + Sync>`"
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

/// [`FromLockError`] for an error type that depends on the function's
/// generics (`E`, `M::Error`, `<M as Trait>::Error`): no `impl From` can be
/// written for those, so the message asks for a `where` bound instead.
#[diagnostic::on_unimplemented(
    message = "#[locked] cannot return lock errors as `{Self}`: nothing says it implements `From<lock_core::Error>`",
    label = "lock errors (store unreachable, unknown manager, bad name) are returned through this generic error type",
    note = "add the bound to the function: `where {Self}: From<lock_core::Error>`"
)]
pub trait FromLockErrorBound: Sized {
    /// Wraps `error` as `Self`.
    fn from_lock_error(error: Error) -> Self;
}

impl<E: From<Error>> FromLockErrorBound for E {
    fn from_lock_error(error: Error) -> Self {
        E::from(error)
    }
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

    const TTL: Duration = Duration::from_secs(5);

    fn options() -> LockOptions {
        LockOptions::DEFAULT
    }

    // Named managers are how `manager = "x"` reaches its store; a missing one
    // must be an error that names the fix, not a silent fallback.
    #[tokio::test]
    async fn an_unknown_named_manager_is_an_error_not_the_default_manager() {
        let error = lock(
            Some("private-tests-never-installed"),
            "jobs",
            TTL,
            Duration::ZERO,
            options(),
        )
        .expect_err("no manager of that name is installed");
        assert!(
            matches!(error, Error::UnknownManager { ref name } if name == "private-tests-never-installed"),
            "got {error:?}"
        );
        let ran = run_plain(
            lock(
                Some("private-tests-never-installed"),
                "jobs",
                TTL,
                Duration::ZERO,
                options(),
            ),
            async { 1 },
        )
        .await;
        assert!(
            matches!(ran, Err(Error::UnknownManager { .. })),
            "the call fails with it, without running: {ran:?}"
        );
    }

    // The override is what tests rely on, and `Lock::run` is what gives the
    // body its lease: the expansion must go through both.
    #[tokio::test]
    async fn a_locked_body_runs_in_the_override_manager_with_its_lease_as_current() {
        let locks = LockManager::memory();
        registry::with_manager(locks.clone(), async {
            let lock_for_call = || lock(None, "jobs", TTL, Duration::ZERO, options());
            let inner = run_plain(lock_for_call(), async {
                let lease = crate::current().expect("the body sees its lease");
                let held = locks.lock("jobs", TTL).is_held().await.expect("memory");
                // The same task again: re-entry runs under this lease.
                let again = run_plain(lock_for_call(), async { "ran twice" })
                    .await
                    .expect("memory");
                // Another task is another holder: told it is held.
                let other = locks.lock("jobs", TTL);
                let elsewhere = tokio::spawn(async move {
                    other.run(async { Ok::<_, Error>("ran elsewhere") }).await
                })
                .await
                .expect("task")
                .expect("memory");
                assert_eq!(elsewhere, None, "a second caller is told it is held");
                (lease.key().to_owned(), held, again)
            })
            .await
            .expect("memory")
            .expect("nobody holds it");
            assert_eq!(inner.0, "lock:jobs", "the lease is this lock's");
            assert!(inner.1, "the lock is taken in the override manager");
            assert_eq!(
                inner.2,
                Some("ran twice"),
                "re-entered, not waiting for itself"
            );
            assert!(
                !locks.lock("jobs", TTL).is_held().await.expect("memory"),
                "released after the body"
            );
        })
        .await;
    }

    // Each option must reach the lock; these are the ones whose
    // effect shows without waiting: fencing, the shared requirement and
    // contention as an error.
    #[tokio::test]
    async fn each_option_becomes_its_builder_call() {
        let locks = LockManager::memory();
        registry::with_manager(locks.clone(), async {
            let fenced = LockOptions {
                fenced: true,
                ..options()
            };
            let fence = run_plain(lock(None, "f", TTL, Duration::ZERO, fenced), async {
                crate::current().and_then(|lease| lease.fence())
            })
            .await
            .expect("memory fences")
            .expect("free");
            assert!(fence.is_some(), "fenced gives a token");

            let shared = LockOptions {
                shared: true,
                ..options()
            };
            let refused = run_plain(lock(None, "s", TTL, Duration::ZERO, shared), async {}).await;
            assert!(
                matches!(refused, Err(Error::NotShared { .. })),
                "shared refuses a memory store: {refused:?}"
            );

            let _held = locks.lock("c", TTL).acquire().await.expect("memory");
            let contended: std::result::Result<u8, Failure<AppError>> =
                run_or_contended(lock(None, "c", TTL, Duration::ZERO, options()), async {
                    Ok(1)
                })
                .await;
            assert!(
                matches!(contended, Err(Failure::Lock(Error::Contended { .. }))),
                "contention is a lock failure: {contended:?}"
            );
        })
        .await;
    }

    // The body's own error must stay the body's, apart from lock errors, so
    // it is returned unconverted.
    #[tokio::test]
    async fn the_bodys_own_error_is_kept_apart_from_lock_errors() {
        registry::with_manager(LockManager::memory(), async {
            let out: std::result::Result<Option<u8>, Failure<&str>> =
                run(lock(None, "e", TTL, Duration::ZERO, options()), async {
                    Err("the body's own")
                })
                .await;
            assert!(
                matches!(out, Err(Failure::Work("the body's own"))),
                "got {out:?}"
            );
        })
        .await;
    }

    // Lock errors reach users through their own error type.
    #[test]
    fn a_lock_error_converts_into_any_error_that_takes_it() {
        let error: AppError = FromLockError::from_lock_error(Error::AlreadyInstalled);
        assert!(matches!(error.0, Error::AlreadyInstalled), "wrapped as is");
        let boxed: Box<dyn std::error::Error + Send + Sync> =
            FromLockError::from_lock_error(Error::AlreadyInstalled);
        assert!(boxed.to_string().contains("already installed"), "{boxed}");
    }

    // The constant expansions name carries this crate's own major.minor
    // version (the two crates are released together): a release that
    // forgets to rename it would let a mismatched attribute compile.
    #[test]
    fn the_version_expansions_check_is_this_crates_version() {
        let () = LOCK_MACROS_0_1;
        assert_eq!(
            (
                env!("CARGO_PKG_VERSION_MAJOR"),
                env!("CARGO_PKG_VERSION_MINOR")
            ),
            ("0", "1"),
            "rename LOCK_MACROS_0_1 to this version, here and nowhere else"
        );
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
            LockOptions {
                renew: true,
                max_hold: Some(Duration::from_secs(3600)),
                ..LockOptions::DEFAULT
            },
            "src/app.rs",
            7,
        );
        assert_eq!(lock.name(), "jobs:{id}", "template");
        assert_eq!(lock.literal_name(), None, "template has no literal name");
        assert_eq!(lock.function(), "app::run", "function");
        assert_eq!(lock.ttl(), Duration::from_secs(30), "ttl");
        assert_eq!(lock.wait(), Duration::from_secs(2), "wait");
        assert_eq!(lock.manager(), Some("billing"), "manager");
        assert!(lock.options().renew, "renew");
        assert_eq!(
            lock.options().max_hold,
            Some(Duration::from_secs(3600)),
            "max_hold"
        );
        assert!(!lock.options().fenced, "fenced");
        assert_eq!((lock.file(), lock.line()), ("src/app.rs", 7), "location");
    }
}
