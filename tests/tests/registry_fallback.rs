//! The registry with nothing installed. Its own test binary, so no other test
//! installs a default manager first.

use std::time::Duration;

use lock_core::registry;
use lock_tests::logs::Captured;

/// An app that forgot to install a manager still works on one process, but
/// must be told, once, that its locks do not reach other processes.
#[tokio::test(flavor = "current_thread")]
async fn with_nothing_installed_locks_are_per_process_and_a_warning_says_so_once() {
    let (logs, _guard) = Captured::start();
    let first = registry::manager();
    let second = registry::manager();
    assert!(
        !first.is_shared(),
        "the fallback is a per-process memory manager"
    );
    let warnings = logs.matching("WARN", "no lock manager installed");
    assert_eq!(
        warnings.len(),
        1,
        "one warning, not one per call: {:#?}",
        logs.lines()
    );
    assert!(
        warnings[0].contains("registry::install"),
        "the warning says how to fix it: {}",
        warnings[0]
    );

    let held = first
        .lock("fallback", Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    assert!(held.is_some(), "free at first");
    let again = second
        .lock("fallback", Duration::from_secs(30))
        .acquire()
        .await
        .expect("acquire");
    assert!(
        again.is_none(),
        "every call gets the same process-wide store"
    );
}
