//! The `#[locked]` attribute of [lock-core](https://docs.rs/lock-core).
//!
//! Use it through `lock_core::locked`: lock-core re-exports it (default
//! feature `macros`), so an application depends on lock-core alone. The
//! reference is on [`locked`].
//!
//! The crate is split the way the attribute is processed: `args` reads
//! `key = "value"` pairs, `validate` checks them (durations, the name
//! template against the function's arguments), `expand` emits the function.
//! The runtime side of the expansion is ordinary Rust in
//! `lock_core::__private`.

mod args;
mod duration;
mod expand;
mod template;
mod validate;

use proc_macro::TokenStream;

/// Runs an `async fn` only while holding a named lease.
///
/// ```
/// use lock_core::locked;
/// # #[derive(Debug)] struct Report;
/// # #[derive(Debug)] struct AppError;
/// # impl From<lock_core::Error> for AppError { fn from(_: lock_core::Error) -> Self { AppError } }
/// # async fn render(_: &str) -> Result<Report, AppError> { Ok(Report) }
///
/// #[locked(name = "reports:{tenant}", ttl = "10m", wait = "2s")]
/// async fn build_report(tenant: &str) -> Result<Report, AppError> {
///     render(tenant).await
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), AppError> {
/// match build_report("acme").await? {
///     Some(report) => println!("built {report:?}"),
///     None => println!("another worker is building the acme report"),
/// }
/// # Ok(()) }
/// ```
///
/// Every call first takes the lease `reports:acme` (for `tenant = "acme"`)
/// from the manager `lock_core::registry` resolves, waiting up
/// to `wait` for a holder to let go. If it gets the lease it runs the body and
/// returns `Ok(Some(value))`; if somebody else holds it for the whole wait, the
/// body does **not** run and the call returns `Ok(None)`. The lease is given
/// back however the body ends: it returns `Ok`, returns `Err`, panics (the
/// panic goes on to the caller unchanged), or the call's future is dropped.
///
/// # What goes wrong without this
///
/// Jobs that must not overlap (an export, a cache rebuild, a billing run) get
/// started twice: by two servers on the same schedule, by a retry racing the
/// original, by an impatient user clicking twice. Doing the locking by hand
/// means remembering, at every call site, to take the lock, to skip the work
/// when it is taken, and to release it on every path out, including panics
/// and cancellation. This attribute does all of it from one line, and checks
/// the line at compile time.
///
/// # Keys
///
/// Every value is a string literal. Mistakes (a missing `ttl`, a misspelt
/// key, a duration like `"10x"`, a placeholder that names no argument) are
/// compile errors that point at the offending token and say the fix; all the
/// mistakes in one attribute are reported in one compile.
///
/// ## `ttl` (required)
///
/// How long one lease lasts unless released first: `ttl = "10m"`. Choose it
/// above the longest the body can take. It is what frees the lock when the
/// holder's process dies; a lease that outlives its TTL is lost, and the next
/// caller may run alongside the overrunning one (see the guarantee below).
/// A zero TTL is refused.
///
/// ## `wait` (optional)
///
/// How long a call waits for a holder to let go before giving up with
/// `Ok(None)`: `wait = "2s"`. Without it (or with `"0s"`) a contended call
/// returns `Ok(None)` at once. Waiting does not poll: the waiter wakes when the
/// lock is released, when the holder's TTL runs out, or at its deadline.
///
/// ## `name` (optional)
///
/// The lock name, a template: `name = "reports:{tenant}"`.
///
/// - `{arg}` is replaced by the argument's `Display` output on each call, so
///   each argument value gets its own lock: `build_report("acme")` and
///   `build_report("globex")` do not block each other.
/// - `{arg.field}` (and `{arg.field.inner}`, `{pair.0}`) reads a field of an
///   argument; `{self.field}` reads a field of the receiver of a method.
/// - Arguments bound by patterns count too: `(a, b): (u32, u32)` allows `{a}`.
/// - `{{` and `}}` are literal braces.
///
/// Every placeholder is checked against the function's arguments at compile
/// time. Without `name`, the lock is named after the function's path,
/// `module::path::function`. Two methods of the same name in one module share
/// that default name, so give methods a `name`.
///
/// ## `manager` (optional)
///
/// The name of a manager installed with
/// `lock_core::registry::install_named`:
/// `manager = "billing"`. Without it the function uses the default manager,
/// `lock_core::registry::manager`. A manager that is not
/// installed makes each call fail with
/// `lock_core::Error::UnknownManager`;
/// `lock_core::registry::verify` reports it at boot.
/// Inside `lock_core::registry::with_manager`, the
/// override is used whatever `manager` says, so tests need no global setup.
///
/// ## `crate` (optional)
///
/// The path to lock-core, for crates that rename the dependency or re-export
/// it: `crate = "my_locks"` or `crate = "crate::deps::lock_core"`. The
/// default is `::lock_core`.
///
/// # Durations
///
/// `ttl` and `wait` take one or more `<whole number><unit>` groups, added
/// together, with optional spaces: `"250ms"`, `"2s"`, `"10m"`, `"1h 30m"`,
/// `"1d"`. Units: `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`, `d`. They are
/// parsed at compile time and emitted as `Duration` constants; negative,
/// fractional, unit-less and overflowing durations are compile errors.
///
/// # Return types
///
/// A locked function can return `None` and lock errors, so its return type
/// changes:
///
/// | declared | becomes | lock errors |
/// |---|---|---|
/// | `-> Result<T, E>` | `-> Result<Option<T>, E>` | converted with `E: From<lock_core::Error>` |
/// | `-> Result<T>` (an alias: `anyhow::Result`, `io::Result`, `AppResult`…) | `-> Result<Option<T>>` | converted with `From` into the alias's error type |
/// | `-> T`, or nothing | `-> Result<Option<T>, lock_core::Error>` | returned as they are |
///
/// `Ok(None)` always means "somebody else held the lock for the whole wait;
/// the body did not run". A type counts as a `Result` when the last segment
/// of its path is named `Result` or ends in `Result` (aliases cannot be looked
/// through at compile time). When `E` cannot take a `lock_core::Error`, the
/// compiler says so at the return type, with the `From` impl to add.
///
/// Inside the body nothing changes: `return` and `?` return from the body
/// with the declared type, exactly as without the attribute.
///
/// # Equivalent code
///
/// The example at the top expands to the equivalent of this hand-written
/// function (plus a link-time record for
/// `lock_core::registry::declared`):
///
/// ```
/// # #[derive(Debug)] struct Report;
/// # #[derive(Debug)] struct AppError;
/// # impl From<lock_core::Error> for AppError { fn from(_: lock_core::Error) -> Self { AppError } }
/// # async fn render(_: &str) -> Result<Report, AppError> { Ok(Report) }
/// use std::time::Duration;
/// use lock_core::registry;
///
/// async fn build_report(tenant: &str) -> Result<Option<Report>, AppError> {
///     const TTL: Duration = Duration::from_secs(600);
///     const WAIT: Duration = Duration::from_secs(2);
///     let lock = registry::manager() // or manager_named("...")? for `manager = "..."`
///         .lock(format!("reports:{}", tenant), TTL)
///         .wait_for(WAIT);
///     let guard = match lock.acquire().await {
///         Ok(Some(guard)) => guard,
///         Ok(None) => return Ok(None), // contended: the body does not run
///         Err(error) => return Err(AppError::from(error)),
///     };
///     // The body runs in a block of its own, so its `return` and `?` keep
///     // their meaning. If it panics or this future is dropped, `guard` is
///     // dropped and its `Drop` releases the lease.
///     let out: Result<Report, AppError> = async move { render(tenant).await }.await;
///     // A failed release is logged at WARN; the body's result wins.
///     let _ = guard.release().await;
///     out.map(Some)
/// }
/// ```
///
/// # Where it works
///
/// On free functions and inherent methods (`&self`, `&mut self`, `self`,
/// `self: Arc<Self>`), with generics, `where` clauses, lifetimes, `impl Trait`
/// arguments and returns, `mut` and pattern parameters, and any other
/// attributes (`doc`, `cfg`, `must_use`…), which are kept. The returned future
/// is `Send` whenever the body's is, so locked functions can be spawned.
///
/// Not in trait impls: the attribute changes the return type, which would no
/// longer match the trait. Under `#[async_trait]` it says so; on a native
/// `async fn` in a trait impl the compiler reports the mismatched return
/// type. Put `#[locked]` on an inherent method and call it from the impl:
///
/// ```
/// # use lock_core::locked;
/// trait Job {
///     async fn run(&self) -> Result<Option<u32>, lock_core::Error>;
/// }
///
/// struct Nightly;
///
/// impl Nightly {
///     #[locked(name = "nightly", ttl = "1h")]
///     async fn run_locked(&self) -> u32 {
///         42
///     }
/// }
///
/// impl Job for Nightly {
///     async fn run(&self) -> Result<Option<u32>, lock_core::Error> {
///         self.run_locked().await
///     }
/// }
/// ```
///
/// # Declared locks
///
/// Every `#[locked]` function registers itself at link time:
/// `lock_core::registry::declared` lists each one's name
/// template, function path, TTL, wait, manager, file and line, and
/// `lock_core::registry::verify` checks them at boot (every
/// named manager installed, no lock name declared with two TTLs).
///
/// # The guarantee, stated honestly
///
/// A lease, not a mutex. While the lease is held nobody else runs the body
/// under the same name; but a body that outlives its TTL loses the lease, and
/// the next caller can run alongside it:
///
/// ```text
/// t=0s   call A takes reports:acme (ttl 10m)   A's body runs...
/// t=10m  A's lease expires                     call B takes it, B's body runs   A still running
/// t=12m  A's body ends; its release finds the lease gone and leaves B's alone
/// ```
///
/// Choose the TTL above the body's longest run. A memory store (the default
/// with nothing installed) excludes tasks of one process only.
#[proc_macro_attribute]
pub fn locked(args: TokenStream, item: TokenStream) -> TokenStream {
    expand::locked(args.into(), item.into()).into()
}

/// Every problem found while reading one attribute, reported together.
#[derive(Default)]
pub(crate) struct Errors(Option<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        match &mut self.0 {
            Some(errors) => errors.combine(error),
            None => self.0 = Some(error),
        }
    }

    pub(crate) fn into_compile_errors(self) -> proc_macro2::TokenStream {
        self.0
            .map(syn::Error::into_compile_error)
            .unwrap_or_default()
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    #[cfg(test)]
    pub(crate) fn messages(&self) -> Vec<String> {
        self.0
            .iter()
            .flat_map(|errors| errors.clone().into_iter())
            .map(|error| error.to_string())
            .collect()
    }
}
