//! The catalogue of declared locks: every `#[locked]` function in the
//! binary ([`declared`]), as the attribute recorded it. [`verify`](super::verify)
//! checks it at boot.

use std::time::Duration;

use crate::LockOptions;

/// One `#[locked]` function, as the attribute recorded it at compile time.
///
/// Every `#[locked]` function linked into the binary registers one of these
/// before `main` runs; [`declared`] lists them and [`verify`](super::verify) checks them.
/// Nothing here is evaluated per call: it describes the source.
#[derive(Debug)]
pub struct DeclaredLock {
    pub(crate) name: &'static str,
    pub(crate) literal_name: Option<&'static str>,
    pub(crate) function: &'static str,
    pub(crate) ttl: Duration,
    pub(crate) wait: Duration,
    pub(crate) manager: Option<&'static str>,
    pub(crate) options: LockOptions,
    pub(crate) file: &'static str,
    pub(crate) line: u32,
}

inventory::collect!(DeclaredLock);

impl DeclaredLock {
    /// The lock name template as written (`"reports:{tenant}"`), or the
    /// function's path when the attribute gives no `name`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The exact lock name when it is the same on every call (no
    /// placeholders), with `{{` and `}}` unescaped; `None` for a template.
    pub fn literal_name(&self) -> Option<&'static str> {
        self.literal_name
    }

    /// The function's path: its module path and name, like `app::jobs::rebuild`.
    /// A method shows its module, not its type.
    pub fn function(&self) -> &'static str {
        self.function
    }

    /// The `ttl` key: how long each lease lasts unless released first.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The `wait` key: how long a call waits for the lock; zero when it does not wait.
    pub fn wait(&self) -> Duration {
        self.wait
    }

    /// The `manager` key: the name of the manager the function uses, `None`
    /// for the default manager.
    pub fn manager(&self) -> Option<&'static str> {
        self.manager
    }

    /// The lease options the attribute gave (`renew`, `max_hold`,
    /// `on_lost`, `at_least`, `fenced`, `shared`, `contended`, `permits`,
    /// `read`), as the
    /// [`Lock`](crate::Lock) each call builds uses them.
    pub fn options(&self) -> &LockOptions {
        &self.options
    }

    /// The source file of the attribute.
    pub fn file(&self) -> &'static str {
        self.file
    }

    /// The source line of the attribute.
    pub fn line(&self) -> u32 {
        self.line
    }
}

/// Every `#[locked]` function in the binary, ordered by file and line.
///
/// For boot-time checks, admin pages and tests: for example, assert that
/// every lock your service declares has a TTL above its job timeout.
pub fn declared() -> Vec<&'static DeclaredLock> {
    let mut all: Vec<&'static DeclaredLock> = inventory::iter::<DeclaredLock>().collect();
    all.sort_by(|a, b| (a.file, a.line, a.function).cmp(&(b.file, b.line, b.function)));
    all
}
