//! The catalogue of declared locks: every `#[locked]` function in the
//! binary ([`declared`]), and the boot-time check of them against the
//! installed managers and each other ([`verify`]).

use std::time::Duration;

use super::{manager, manager_named};
use crate::LockOptions;

/// One `#[locked]` function, as the attribute recorded it at compile time.
///
/// Every `#[locked]` function linked into the binary registers one of these
/// before `main` runs; [`declared`] lists them and [`verify`] checks them.
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
    /// `on_lost`, `at_least`, `fenced`, `shared`, `contended`), as the
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

/// Checks the declared locks against the installed managers and each other,
/// and returns every problem found.
///
/// Call it at startup, after installing managers, so a misconfiguration stops
/// the deploy instead of surfacing as errors on the first call:
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use lock_core::{registry, LockManager};
///
/// registry::install_named("billing", LockManager::memory())?;
/// registry::verify()?;
/// # Ok(()) }
/// ```
///
/// # Errors
///
/// [`Problems`], listing each [`Problem`]: a `manager = "x"` that is not
/// installed; one literal lock name declared with different TTLs (one
/// problem per name, listing every declaration); one name declared with
/// different `permits`; a `shared` function whose
/// manager is not [shared](crate::LockManager::is_shared).
///
/// Every check looks at the manager a call would use at this moment: the
/// named one, or [`manager`](super::manager) for functions that name none (so, with nothing
/// installed, the per-process fallback, which is never shared). Inside
/// [`with_manager`](super::with_manager) that is the override, for named managers too, exactly as
/// calls there resolve it.
pub fn verify() -> std::result::Result<(), Problems> {
    // Exactly what a call would resolve right now: inside `with_manager`
    // that is the override, for named managers too.
    let installed = |name: &str| manager_named(name).is_ok();
    let shared = |named: Option<&str>| match named {
        Some(name) => manager_named(name).ok().map(|manager| manager.is_shared()),
        None => Some(manager().is_shared()),
    };
    let declared = declared();
    let mut problems = Vec::new();
    // Locks on the default manager, with none installed: each would run on
    // a per-process memory store, silently (its WARN needs a subscriber).
    let on_default: Vec<&'static DeclaredLock> = declared
        .iter()
        .copied()
        .filter(|lock| lock.manager.is_none())
        .collect();
    if !on_default.is_empty() && super::default_is_fallback() {
        problems.push(Problem::NoManagerInstalled {
            declarations: on_default,
        });
    }
    problems.extend(problems_in(&declared, &installed, &shared));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Problems(problems))
    }
}

/// The checks behind [`verify`], over any set of declarations.
///
/// `installed(name)` says whether a call naming that manager would find one;
/// `shared(manager)` whether the manager a declaration uses is shared, `None`
/// when it cannot be resolved (a missing manager, reported apart).
fn problems_in(
    declared: &[&'static DeclaredLock],
    installed: &dyn Fn(&str) -> bool,
    shared: &dyn Fn(Option<&str>) -> Option<bool>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    for lock in declared {
        if let Some(manager) = lock.manager {
            if !installed(manager) {
                problems.push(Problem::ManagerNotInstalled { lock });
                continue;
            }
        }
        if lock.options.shared && shared(lock.manager) == Some(false) {
            problems.push(Problem::NotShared { lock });
        }
    }
    // One lock (literal name, manager) declared with more than one TTL is
    // one problem, listing every declaration of it, whatever their order.
    let mut seen: Vec<(&str, Option<&str>)> = Vec::new();
    for first in declared {
        let Some(name) = first.literal_name else {
            continue;
        };
        if seen.contains(&(name, first.manager)) {
            continue;
        }
        seen.push((name, first.manager));
        let same: Vec<&'static DeclaredLock> = declared
            .iter()
            .copied()
            .filter(|other| other.literal_name == Some(name) && other.manager == first.manager)
            .collect();
        if same.iter().any(|other| other.ttl != first.ttl) {
            problems.push(Problem::ConflictingTtl {
                name,
                declarations: same,
            });
        }
    }
    // One name (as written, templates too) declared with more than one
    // permit count: the processes would disagree on how many may hold it.
    let mut seen: Vec<(&str, Option<&str>)> = Vec::new();
    for first in declared {
        if seen.contains(&(first.name, first.manager)) {
            continue;
        }
        seen.push((first.name, first.manager));
        let same: Vec<&'static DeclaredLock> = declared
            .iter()
            .copied()
            .filter(|other| other.name == first.name && other.manager == first.manager)
            .collect();
        if same
            .iter()
            .any(|other| other.options.permits != first.options.permits)
        {
            problems.push(Problem::ConflictingPermits {
                name: first.name,
                declarations: same,
            });
        }
    }
    problems
}

/// One problem [`verify`] found.
#[derive(Debug)]
#[non_exhaustive]
pub enum Problem {
    /// A function names a manager that is not installed: each call would fail
    /// with [`Error::UnknownManager`](crate::Error::UnknownManager).
    ManagerNotInstalled {
        /// The declaration naming the manager.
        lock: &'static DeclaredLock,
    },
    /// No default manager is installed, so the functions that use it lock on
    /// a per-process memory store: their locks do not exclude other
    /// processes.
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
                    "no manager installed: locks are per-process; {} declared lock(s) use the \
                     default manager (",
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
                    "), and with none installed they lock on a memory store that other \
                     processes cannot see; call `lock_core::registry::install(manager)` at startup"
                )
            }
            Problem::NotShared { lock } => {
                let (manager, install) = match lock.manager {
                    Some(name) => (
                        format!("the lock manager `{name}`"),
                        format!("`lock_core::registry::install_named(\"{name}\", manager)`"),
                    ),
                    None => (
                        "the default lock manager".to_owned(),
                        "`lock_core::registry::install(manager)`".to_owned(),
                    ),
                };
                write!(
                    f,
                    "`{}` ({}:{}) is declared `shared`, but {manager} keeps its locks in this \
                     process only, so every call would fail with `NotShared`; install a manager \
                     over a shared store (such as Redis) with {install} at startup, or use \
                     `declared_shared()` if the application truly runs as one process",
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

/// Every problem [`verify`] found; displays one per line.
#[derive(Debug)]
pub struct Problems(Vec<Problem>);

impl Problems {
    /// The problems, in declaration order.
    pub fn iter(&self) -> std::slice::Iter<'_, Problem> {
        self.0.iter()
    }

    /// How many problems were found (at least one).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Always false: [`verify`] returns `Ok` when there is no problem.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn leak(
        literal_name: Option<&'static str>,
        function: &'static str,
        ttl: u64,
        manager: Option<&'static str>,
    ) -> &'static DeclaredLock {
        Box::leak(Box::new(DeclaredLock {
            name: literal_name.unwrap_or("jobs:{id}"),
            literal_name,
            function,
            ttl: Duration::from_secs(ttl),
            wait: Duration::ZERO,
            manager,
            options: LockOptions::DEFAULT,
            file: "src/jobs.rs",
            line: 1,
        }))
    }

    fn leak_shared(function: &'static str, manager: Option<&'static str>) -> &'static DeclaredLock {
        Box::leak(Box::new(DeclaredLock {
            options: LockOptions {
                shared: true,
                ..LockOptions::DEFAULT
            },
            ..*leak(Some(function), function, 10, manager)
        }))
    }

    fn all_shared(_: Option<&str>) -> Option<bool> {
        Some(true)
    }

    // A manager that is not installed makes every call fail; verify must
    // catch it at boot, and only for the managers actually missing.
    #[test]
    fn a_declaration_naming_a_missing_manager_is_a_problem() {
        let declared = [
            leak(Some("a"), "app::a", 10, Some("billing")),
            leak(Some("b"), "app::b", 10, Some("reports")),
            leak(Some("c"), "app::c", 10, None),
        ];
        let problems = problems_in(&declared, &|name| name == "reports", &all_shared);
        assert_eq!(problems.len(), 1, "only billing is missing: {problems:?}");
        let text = problems[0].to_string();
        assert!(
            text.contains("`app::a`") && text.contains("install_named(\"billing\""),
            "names the function and the fix: {text}"
        );
    }

    // Two TTLs for one lock means the lease length depends on who runs first.
    #[test]
    fn one_literal_name_with_two_ttls_is_one_problem() {
        let declared = [
            leak(Some("nightly"), "app::a", 10, None),
            leak(Some("nightly"), "app::b", 20, None),
            leak(Some("nightly"), "app::c", 20, None),
            leak(Some("nightly"), "app::d", 10, Some("other")),
            leak(None, "app::e", 30, None),
            leak(None, "app::f", 40, None),
        ];
        let problems = problems_in(&declared, &|_| true, &all_shared);
        assert_eq!(
            problems.len(),
            1,
            "one conflict reported once; other managers and templates are not compared: {problems:?}"
        );
        let text = problems[0].to_string();
        assert!(
            text.contains("`nightly`") && text.contains("10s") && text.contains("20s"),
            "names the lock and both ttls: {text}"
        );
    }

    // However the declarations are ordered, one name with conflicting ttls
    // is one problem that lists every declaration, agreeing ones included:
    // the operator must see all the places to change.
    #[test]
    fn one_name_declared_with_agreeing_and_conflicting_ttls_is_one_problem_listing_all() {
        for ttls in [[10, 10, 20], [20, 10, 10], [10, 20, 10]] {
            let declared = [
                leak(Some("nightly"), "app::a", ttls[0], None),
                leak(Some("nightly"), "app::b", ttls[1], None),
                leak(Some("nightly"), "app::c", ttls[2], None),
            ];
            let problems = problems_in(&declared, &|_| true, &all_shared);
            assert_eq!(problems.len(), 1, "ttls {ttls:?}: {problems:?}");
            let text = problems[0].to_string();
            for function in ["`app::a`", "`app::b`", "`app::c`"] {
                assert!(
                    text.contains(function),
                    "ttls {ttls:?}: lists {function}: {text}"
                );
            }
        }
    }

    // Processes running different functions on one name must agree on how
    // many may hold it; templates count too, and other names are left alone.
    #[test]
    fn one_name_declared_with_different_permits_is_one_problem() {
        let with_permits = |function: &'static str, permits: u32| -> &'static DeclaredLock {
            Box::leak(Box::new(DeclaredLock {
                options: LockOptions {
                    permits,
                    ..LockOptions::DEFAULT
                },
                ..*leak(None, function, 10, None)
            }))
        };
        let declared = [
            with_permits("app::a", 3),
            with_permits("app::b", 4),
            leak(Some("other"), "app::c", 10, None),
        ];
        let problems = problems_in(&declared, &|_| true, &all_shared);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(matches!(problems[0], Problem::ConflictingPermits { .. }));
        let text = problems[0].to_string();
        assert!(
            text.contains("jobs:{id}")
                && text.contains(" 3 in `app::a`")
                && text.contains(" 4 in `app::b`"),
            "names the lock and both counts: {text}"
        );
        let agreeing = [with_permits("app::a", 3), with_permits("app::b", 3)];
        assert!(problems_in(&agreeing, &|_| true, &all_shared).is_empty());
    }

    // Agreeing declarations must not be flagged, or verify becomes noise.
    #[test]
    fn agreeing_declarations_are_no_problem() {
        let declared = [
            leak(Some("nightly"), "app::a", 10, None),
            leak(Some("nightly"), "app::b", 10, None),
        ];
        assert!(
            problems_in(&declared, &|_| true, &all_shared).is_empty(),
            "same name, same ttl"
        );
    }

    // A `shared` function on a per-process manager fails every call with
    // NotShared; verify must say so at boot, for the default manager and for
    // named ones, and leave shared managers and unshared locks alone.
    #[test]
    fn a_shared_declaration_on_a_per_process_manager_is_a_problem() {
        let declared = [
            leak_shared("app::default_memory", None),
            leak_shared("app::named_memory", Some("local")),
            leak_shared("app::named_redis", Some("redis")),
            leak_shared("app::missing", Some("missing")),
            leak(Some("app::unshared"), "app::unshared", 10, None),
        ];
        let shared = |manager: Option<&str>| match manager {
            None | Some("local") => Some(false),
            Some("redis") => Some(true),
            Some(_) => None,
        };
        let problems = problems_in(&declared, &|name| name != "missing", &shared);
        let named: Vec<&str> = problems
            .iter()
            .map(|problem| match problem {
                Problem::NotShared { lock } | Problem::ManagerNotInstalled { lock } => {
                    lock.function
                }
                Problem::ConflictingTtl { declarations, .. }
                | Problem::ConflictingPermits { declarations, .. }
                | Problem::NoManagerInstalled { declarations } => declarations[0].function,
            })
            .collect();
        assert_eq!(
            named,
            ["app::default_memory", "app::named_memory", "app::missing"],
            "both per-process managers, and the missing one only as missing: {problems:?}"
        );
        assert!(
            matches!(problems[2], Problem::ManagerNotInstalled { .. }),
            "a missing manager is reported as missing, not also as not shared"
        );
        let text = problems[0].to_string();
        assert!(
            text.contains("`app::default_memory`")
                && text.contains("default lock manager")
                && text.contains("registry::install(manager)"),
            "names the function, the manager and the fix: {text}"
        );
        let text = problems[1].to_string();
        assert!(
            text.contains("`local`") && text.contains("install_named(\"local\""),
            "names the named manager and its fix: {text}"
        );
    }
}
