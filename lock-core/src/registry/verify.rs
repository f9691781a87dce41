//! The boot-time check of the declared locks against the installed
//! managers and each other ([`verify`]).

use super::declared::{DeclaredLock, declared};
use super::problems::{Problem, Problems};
use super::{manager, manager_named};

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
/// [`Problems`], listing each [`Problem`]:
///
/// - [`NoManagerInstalled`](Problem::NoManagerInstalled): functions use the
///   default manager and none is installed, so each of their calls would
///   fail with [`Error::NoManager`](crate::Error::NoManager) (one problem,
///   listing them);
/// - [`ManagerNotInstalled`](Problem::ManagerNotInstalled): a `manager =
///   "x"` that is not installed;
/// - [`NotShared`](Problem::NotShared): a `shared` function whose manager
///   is not [shared](crate::LockManager::is_shared);
/// - [`ReadUnsupported`](Problem::ReadUnsupported): a `read` function whose
///   manager's store keeps no readers
///   ([`LockStore::read_mode`](crate::LockStore::read_mode));
/// - [`ConflictingTtl`](Problem::ConflictingTtl): one literal lock name
///   declared with different TTLs (one problem per name, listing every
///   declaration);
/// - [`ConflictingPermits`](Problem::ConflictingPermits): one name declared
///   with different `permits`.
///
/// Every check looks at the manager a call would use at this moment: the
/// named one, or [`manager`](super::manager) for functions that name none (with nothing
/// installed, none: only `NoManagerInstalled` is reported for them). Inside
/// [`with_manager`](super::with_manager) that is the override, for named managers too, exactly as
/// calls there resolve it.
pub fn verify() -> std::result::Result<(), Problems> {
    // Exactly what a call would resolve right now: inside `with_manager`
    // that is the override, for named managers too.
    let installed = |name: &str| manager_named(name).is_ok();
    let resolve = |named: Option<&str>| match named {
        Some(name) => manager_named(name).ok(),
        None => (!super::nothing_installed()).then(manager),
    };
    let shared = |named: Option<&str>| resolve(named).map(|manager| manager.is_shared());
    let reads = |named: Option<&str>| resolve(named).map(|manager| manager.store().read_mode());
    let declared = declared();
    let mut problems = Vec::new();
    // Locks on the default manager, with none installed: each call would
    // fail with `NoManager`.
    let on_default: Vec<&'static DeclaredLock> = declared
        .iter()
        .copied()
        .filter(|lock| lock.manager.is_none())
        .collect();
    if !on_default.is_empty() && super::nothing_installed() {
        problems.push(Problem::NoManagerInstalled {
            declarations: on_default,
        });
    }
    problems.extend(problems_in(&declared, &installed, &shared, &reads));
    if problems.is_empty() {
        Ok(())
    } else {
        Err(Problems(problems))
    }
}

/// The checks behind [`verify`], over any set of declarations.
///
/// `installed(name)` says whether a call naming that manager would find one;
/// `shared(manager)` whether the manager a declaration uses is shared, and
/// `reads(manager)` whether its store keeps readers, each `None` when the
/// manager cannot be resolved (a missing manager, reported apart).
fn problems_in(
    declared: &[&'static DeclaredLock],
    installed: &dyn Fn(&str) -> bool,
    shared: &dyn Fn(Option<&str>) -> Option<bool>,
    reads: &dyn Fn(Option<&str>) -> Option<bool>,
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
        if lock.options.read && reads(lock.manager) == Some(false) {
            problems.push(Problem::ReadUnsupported { lock });
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::LockOptions;

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

    fn leak_read(function: &'static str, manager: Option<&'static str>) -> &'static DeclaredLock {
        Box::leak(Box::new(DeclaredLock {
            options: LockOptions {
                read: true,
                ..LockOptions::DEFAULT
            },
            ..*leak(Some(function), function, 10, manager)
        }))
    }

    fn all_shared(_: Option<&str>) -> Option<bool> {
        Some(true)
    }

    fn all_read(_: Option<&str>) -> Option<bool> {
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
        let problems = problems_in(&declared, &|name| name == "reports", &all_shared, &all_read);
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
        let problems = problems_in(&declared, &|_| true, &all_shared, &all_read);
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
            let problems = problems_in(&declared, &|_| true, &all_shared, &all_read);
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
        let problems = problems_in(&declared, &|_| true, &all_shared, &all_read);
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
        assert!(problems_in(&agreeing, &|_| true, &all_shared, &all_read).is_empty());
    }

    // Agreeing declarations must not be flagged, or verify becomes noise.
    #[test]
    fn agreeing_declarations_are_no_problem() {
        let declared = [
            leak(Some("nightly"), "app::a", 10, None),
            leak(Some("nightly"), "app::b", 10, None),
        ];
        assert!(
            problems_in(&declared, &|_| true, &all_shared, &all_read).is_empty(),
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
        let problems = problems_in(&declared, &|name| name != "missing", &shared, &all_read);
        let named: Vec<&str> = problems
            .iter()
            .map(|problem| match problem {
                Problem::NotShared { lock }
                | Problem::ReadUnsupported { lock }
                | Problem::ManagerNotInstalled { lock } => lock.function,
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

    // A `read` function whose store keeps no readers fails every call with
    // ReadUnsupported; verify must say so at boot, for the default manager
    // and for named ones, and leave stores that keep readers, and writers
    // (no `read`) on any store, alone.
    #[test]
    fn a_read_declaration_on_a_store_that_keeps_no_readers_is_a_problem() {
        let declared = [
            leak_read("app::default_no_readers", None),
            leak_read("app::named_no_readers", Some("cache")),
            leak_read("app::named_readers", Some("readers")),
            leak_read("app::missing", Some("missing")),
            leak(Some("app::writer"), "app::writer", 10, Some("cache")),
        ];
        let reads = |manager: Option<&str>| match manager {
            None | Some("cache") => Some(false),
            Some("readers") => Some(true),
            Some(_) => None,
        };
        let problems = problems_in(&declared, &|name| name != "missing", &all_shared, &reads);
        let named: Vec<(&str, bool)> = problems
            .iter()
            .map(|problem| match problem {
                Problem::ReadUnsupported { lock } => (lock.function, true),
                Problem::ManagerNotInstalled { lock } => (lock.function, false),
                other => panic!("no other problem is declared: {other}"),
            })
            .collect();
        assert_eq!(
            named,
            [
                ("app::default_no_readers", true),
                ("app::named_no_readers", true),
                ("app::missing", false)
            ],
            "both stores without readers, and the missing manager only as missing: {problems:?}"
        );
        let text = problems[0].to_string();
        assert!(
            text.contains("`app::default_no_readers`")
                && text.contains("declared `read`")
                && text.contains("default lock manager")
                && text.contains("registry::install(manager)")
                && text.contains("drop `read`"),
            "names the function, the manager and both fixes: {text}"
        );
        let text = problems[1].to_string();
        assert!(
            text.contains("`cache`") && text.contains("install_named(\"cache\""),
            "names the named manager and its fix: {text}"
        );
    }
}
