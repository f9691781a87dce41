//! The `#[locked]` attribute of [lock-core](https://docs.rs/lock-core).
//!
//! Use it through `lock_core::locked`: lock-core re-exports it (default
//! feature `macros`), so an application depends on lock-core alone. The
//! reference is on [`locked`].
//!
//! The crate is split the way the attribute is processed: `args` reads
//! `key = "value"` pairs against the one table of keys in `keys`,
//! `validate` checks them (durations, the name template against the
//! function's arguments, the options against each other), `expand` emits
//! the function, with the options as one `lock_core::LockOptions` constant
//! (`expand::target` says what the attribute is on and what it refuses,
//! `expand::output` handles the return type, `expand::settings` turns the
//! checked settings into tokens). The runtime side of the
//! expansion is ordinary Rust in `lock_core::__private`, and the expansion
//! names a version constant there, so a lock-macros and a lock-core that do
//! not belong together fail to compile instead of misbehaving.

mod args;
mod duration;
mod expand;
mod keys;
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
/// // Once, at startup: a shared store for a fleet (`lock_core::connect(url)`),
/// // or memory for one process. With none, calls fail with `Error::NoManager`.
/// lock_core::registry::install(lock_core::LockManager::memory())?;
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
/// Inside the body, [`lock_core::current()`](fn.current.html) is the lease it holds.
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
/// Every value is a string literal, but `permits`, a number; `renew`,
/// `fenced`, `shared` and `read` are flags with no value. Mistakes (a missing `ttl`, a misspelt key, a duration like
/// `"10x"`, a placeholder that names no argument, contradictory options) are
/// compile errors that point at the offending token and say the fix; all the
/// mistakes in one attribute are reported in one compile.
///
/// ## `ttl` (required)
///
/// How long one lease lasts unless released first: `ttl = "10m"`. Choose it
/// above the longest the body can take. It is what frees the lock when the
/// holder's process dies; a lease that outlives its TTL is lost, and the next
/// caller may run alongside the overrunning one (see [the
/// guarantee](index.html#the-guarantee-stated-honestly)).
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
/// [`lock_core::registry::install_named`](registry/fn.install_named.html):
/// `manager = "billing"`. Without it the function uses the default manager,
/// [`lock_core::registry::manager`](registry/fn.manager.html). A manager that is not
/// installed makes each call fail, before the body runs, with
/// [`lock_core::Error::UnknownManager`](enum.Error.html#variant.UnknownManager),
/// or [`lock_core::Error::NoManager`](enum.Error.html#variant.NoManager) for
/// the default one (never a per-process fallback; `manager = "process"`
/// names this process's own memory manager, explicitly);
/// [`lock_core::registry::verify`](registry/fn.verify.html) reports it at boot.
/// Inside [`lock_core::registry::with_manager`](registry/fn.with_manager.html), the
/// override is used whatever `manager` says, so tests need no global setup.
///
/// ## `crate` (optional)
///
/// The path to lock-core, for crates that rename the dependency or re-export
/// it: `crate = "my_locks"` or `crate = "crate::deps::lock_core"`. The
/// default is `::lock_core`.
///
/// # Lease options
///
/// Each key below is the attribute form of a [`lock_core::Lock`](struct.Lock.html) builder call,
/// with the same behaviour (each builder method's docs say what it
/// guarantees, and [lock-core's guarantee](index.html#the-guarantee-stated-honestly)
/// what none of them can). `renew`, `fenced`, `shared` and `read` are flags,
/// written bare: `#[locked(ttl = "10s", renew, fenced)]`; `permits` takes a
/// number and the others a string.
///
/// ## `renew` (flag)
///
/// While the body runs, the lease is extended back to `ttl` every `ttl / 3`,
/// atomically ([`Lock::renew`](struct.Lock.html#method.renew)). For work that may run longer than any TTL you
/// would dare to set: a crashed process stops renewing, so its lease still
/// ends within one `ttl`.
///
/// ## `max_hold` (optional, needs `renew`)
///
/// Renewal never pushes the lease past acquisition + `max_hold`
/// ([`Lock::max_hold`](struct.Lock.html#method.max_hold)): `renew, max_hold = "1h"`. A stuck body then loses the
/// lease instead of holding the lock forever. Without `renew` it is a
/// compile error.
///
/// ## `on_lost` (optional)
///
/// What happens when the lease is known lost while the body runs (a renewal
/// found it gone, or its deadline passed unrenewed):
///
/// - `on_lost = "continue"` (the default) logs at ERROR and lets the body
///   finish; it may then run alongside the next holder. The body can watch
///   for it with [`lock_core::current()`](fn.current.html) and its `lost()` future.
/// - `on_lost = "cancel"` drops the body at that moment and returns
///   `Err(lock_core::Error::LeaseLost { .. })`, converted like every other
///   lock error. Detection is as fast as the next renewal, so pair it with
///   `renew` for prompt cancellation.
///
/// ## `at_least` (optional)
///
/// When the body ends sooner, the claim stands until acquisition +
/// `at_least`, kept by the store's own expiry ([`Lock::at_least`](struct.Lock.html#method.at_least)):
/// `at_least = "50s"`. What a scheduler's "one server per minute" needs: a
/// server whose tick comes late finds the minute taken. Longer than `ttl`
/// is a compile error. The claim stands after a failed body too.
///
/// ## `fenced` (flag)
///
/// Each call's lease gets a fencing token that strictly increases per lock
/// name, across holders, processes and releases ([`Lock::fenced`](struct.Lock.html#method.fenced)); the body
/// reads it with `lock_core::current().and_then(|lease| lease.fence())` and
/// passes it to storage that rejects older tokens. A store that cannot keep
/// one makes the call fail with [`lock_core::Error::FencingUnsupported`](enum.Error.html#variant.FencingUnsupported).
///
/// ## `shared` (flag)
///
/// The call refuses to run, with [`lock_core::Error::NotShared`](enum.Error.html#variant.NotShared), when its
/// manager's store is per-process ([`Lock::shared`](struct.Lock.html#method.shared)): for work that
/// must not run twice across the fleet, where a forgotten Redis setup would
/// silently give every process a lock of its own.
/// [`lock_core::registry::verify`](registry/fn.verify.html) reports such declarations at boot.
///
/// ## `contended` (optional)
///
/// What a call returns when somebody else holds the lock for the whole wait:
///
/// - `contended = "none"` (the default): `Ok(None)`, with the return type
///   wrapped in `Option` (see below).
/// - `contended = "error"`: `Err(From::from(lock_core::Error::Contended { .. }))`,
///   and the declared return type is kept: `-> Result<T, E>` stays
///   `-> Result<T, E>`. For work that must happen, just not twice at once.
///   The function must return a `Result` (there is no other way to report
///   the contention); anything else is a compile error.
///
/// ```
/// # use lock_core::locked;
/// # #[derive(Debug)] struct AppError;
/// # impl From<lock_core::Error> for AppError { fn from(_: lock_core::Error) -> Self { AppError } }
/// #[locked(name = "charge:{order}", ttl = "30s", contended = "error")]
/// async fn charge(order: u64) -> Result<u64, AppError> {
///     Ok(order * 100)
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), AppError> {
/// # lock_core::registry::install(lock_core::LockManager::memory())?;
/// let cents: u64 = charge(7).await?; // no Option: contention is an AppError
/// assert_eq!(cents, 700);
/// # Ok(()) }
/// ```
///
/// ## `permits` (optional)
///
/// `permits = 4` lets four calls hold the lock at once, fleet-wide: a
/// semaphore ([`Lock::permits`](struct.Lock.html#method.permits)). A positive
/// integer literal; 1, the default, is a plain lock. It cannot be combined
/// with `fenced`, nor with `read`. [`lock_core::registry::verify`](registry/fn.verify.html)
/// reports one name declared with different counts.
///
/// ```
/// # use lock_core::locked;
/// #[locked(name = "payments-provider", ttl = "30s", wait = "10s", permits = 4)]
/// async fn call_provider(order: u64) -> Result<u64, lock_core::Error> {
///     Ok(order)
/// }
/// ```
///
/// ## `read` (flag)
///
/// The call takes the read side of its name ([`Lock::read`](struct.Lock.html#method.read)):
/// any number of `read` calls hold the name together, while a call without
/// `read` on the same name (its write side) excludes readers and writers
/// alike. For "many may read the catalogue at once; a rebuild waits for
/// them and runs alone":
///
/// ```
/// # use lock_core::locked;
/// #[locked(name = "catalog:{id}", ttl = "30s", wait = "1s", read)]
/// async fn show_catalog(id: u64) -> Result<String, lock_core::Error> {
///     Ok(format!("catalog {id}"))
/// }
///
/// #[locked(name = "catalog:{id}", ttl = "10m", wait = "1m")]
/// async fn rebuild_catalog(id: u64) -> Result<(), lock_core::Error> {
///     Ok(())
/// }
/// ```
///
/// Writers are never starved: once a writer waits, new readers wait behind
/// it. Each reader holds a lease of its own, with its own `ttl`: a reader
/// whose process dies holds writers off until its own lease runs out, no
/// longer. A reader never becomes a writer, nor a writer a reader. With
/// `permits` or `fenced` it is a compile error (readers already share the
/// name; a fencing token orders writers). A store that keeps no readers
/// makes the call fail with [`lock_core::Error::ReadUnsupported`](enum.Error.html#variant.ReadUnsupported);
/// [`lock_core::registry::verify`](registry/fn.verify.html) reports such declarations at boot.
///
/// # Re-entry
///
/// A locked function that calls itself, or another function locked on the
/// same name and manager, does not wait for itself: the inner call runs its
/// body under the lease the outer one holds, and returns `Ok(Some(..))`.
/// Tasks it spawns are other holders and wait like anyone else.
///
/// # Durations
///
/// `ttl`, `wait`, `max_hold` and `at_least` take one or more `<whole number><unit>` groups, added
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
/// With `contended = "error"` none of this applies: the declared type is
/// kept, and contention is an error (see `contended` above).
///
/// Inside the body nothing changes: `return` and `?` return from the body
/// with the declared type, exactly as without the attribute.
///
/// # Equivalent code
///
/// The example at the top expands to the equivalent of this hand-written
/// function (plus a link-time record for
/// [`lock_core::registry::declared`](registry/fn.declared.html)):
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
///     // The lease options come here as one `LockOptions` constant,
///     // `.with_options(OPTIONS)`: the same as the builder calls `.renew()`,
///     // `.max_hold(..)`, `.on_lost(..)`, `.at_least(..)`, `.fenced()`,
///     // `.shared()`, `.on_contended(..)`, `.permits(..)`, `.read()`.
///     //
///     // `run` takes the lease (`Ok(None)` when it is held: the body does
///     // not run), runs the body with the lease as `lock_core::current()`,
///     // renews it and reacts to its loss as the options say, and gives it
///     // back however the body ends, a panic or a dropped future included.
///     // The body runs in a block of its own, so its `return` and `?` keep
///     // their meaning. A failed release is logged at WARN; the body's
///     // result wins.
///     lock.run(async move { render(tenant).await }).await
/// }
/// ```
///
/// With `contended = "error"`, `run` becomes `run_or_contended`, which
/// turns contention into `Error::Contended` and keeps the declared type:
///
/// ```
/// # #[derive(Debug)] struct AppError;
/// # impl From<lock_core::Error> for AppError { fn from(_: lock_core::Error) -> Self { AppError } }
/// use std::time::Duration;
/// use lock_core::registry;
///
/// // #[locked(name = "charge:{order}", ttl = "30s", contended = "error")]
/// async fn charge(order: u64) -> Result<u64, AppError> {
///     registry::manager()
///         .lock(format!("charge:{}", order), Duration::from_secs(30))
///         .run_or_contended(async move { Ok(order * 100) })
///         .await
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # lock_core::registry::install(lock_core::LockManager::memory()).unwrap();
/// # assert_eq!(charge(7).await.unwrap(), 700);
/// # }
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
/// Not in traits, neither in a trait impl nor on a trait's provided method:
/// the attribute changes the return type, which would no longer match the
/// trait (or would change the trait for every implementor). Put the lock
/// inside the trait's method instead: call a `#[locked]` inherent method or
/// free function from it, or build the same lock at run time with
/// [`Lock::run`](struct.Lock.html#method.run):
///
/// ```
/// # use lock_core::locked;
/// use std::time::Duration;
///
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
///
/// struct Weekly;
///
/// impl Job for Weekly {
///     async fn run(&self) -> Result<Option<u32>, lock_core::Error> {
///         lock_core::registry::manager()
///             .lock("weekly", Duration::from_secs(3600))
///             .run(async { Ok(7) })
///             .await
///     }
/// }
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// # lock_core::registry::install(lock_core::LockManager::memory()).unwrap();
/// # assert_eq!(Nightly.run().await.unwrap(), Some(42));
/// # assert_eq!(Weekly.run().await.unwrap(), Some(7));
/// # }
/// ```
///
/// An attribute is given the tokens of its function alone, not the `impl`
/// or `trait` around it, so `#[locked]` names this fix in its own words
/// only where those tokens show a trait: a method without a body
/// (`async fn run(&self);`) and a method `#[async_trait]` has already
/// rewritten. A method with a body in a trait impl looks exactly like one
/// in an inherent impl, so there the compiler refuses it instead: the
/// expansion adds a hidden companion const named
/// `locked_cannot_go_in_a_trait__lock_an_inherent_method_and_call_it_from_the_trait__<fn>`,
/// which no trait allows. In a trait impl rustc reports that this const "is
/// not a member of trait", that "visibility qualifiers are not permitted
/// here", and that the method's future no longer resolves to the trait's
/// output type; on a trait's provided method, "visibility qualifiers are not
/// permitted here" alone. At a `#[locked]` method, each of these means: move
/// the lock inside, as above. In modules and inherent impls the const is
/// hidden and unused.
///
/// # Order with other attributes
///
/// Attributes apply top to bottom: the one written first rewrites the
/// function, with the attributes below it still attached. Put `#[locked]`
/// above `#[tokio::main]` and `#[tokio::test]`, so it sees the `async fn`
/// you wrote; below them it would see the plain `fn` they leave, and says
/// so. Entry points must keep their return type, so use `contended =
/// "error"` there (contention is then an error, and `-> Result<(), E>`
/// stays as declared). Their lock is taken before their body runs, so
/// before anything the body could install: name the manager every process
/// has, `manager = "process"`
/// ([`lock_core::registry::PROCESS`](registry/constant.PROCESS.html)), whose
/// locks exclude this process's tasks only. A lock on `main` that must
/// exclude other processes is taken by hand, after the install.
///
/// ```
/// # use lock_core::locked;
/// // Tests of one binary that share a database take turns.
/// #[locked(name = "db-tests", ttl = "30s", wait = "30s", contended = "error", manager = "process")]
/// #[tokio::test]
/// async fn migrates_the_schema() -> Result<(), lock_core::Error> {
///     Ok(())
/// }
/// ```
///
/// With `#[tracing::instrument]` either order works; above `#[locked]` the
/// span covers waiting for the lock too.
///
/// # Declared locks
///
/// Every `#[locked]` function registers itself at link time:
/// [`lock_core::registry::declared`](registry/fn.declared.html) lists each one's name
/// template, function path, TTL, wait, manager, lease options, file and
/// line, and [`lock_core::registry::verify`](registry/fn.verify.html) checks them at boot (a
/// default manager installed when any function uses it, every named
/// manager installed, no lock name declared with two TTLs or two permit
/// counts, no `shared` function on a per-process manager, no `read`
/// function on a store that keeps no readers).
///
/// # The guarantee
///
/// A lease, not a mutex: a body that outlives its TTL loses the lease, and
/// the next caller can run alongside it. What renewal, `on_lost = "cancel"`
/// and `fenced` do about that, and what they cannot, is stated once, in
/// [lock-core's guarantee](index.html#the-guarantee-stated-honestly).
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
