//! The metrics, recorded through the `metrics` facade: what
//! [`lock_core::metrics`](super) documents, with the `metrics` feature.

use std::cell::RefCell;
use std::sync::Mutex;
use std::time::Duration;

use metrics::{Key, Label, Level, Metadata, Unit};
use tokio::time::Instant;

use crate::{LockStore, Result};

/// The `lock` label of a runtime lock given no [`Lock::label`](crate::Lock::label).
pub const UNLABELLED: &str = "unlabelled";

const ACQUISITIONS: &str = "lock_acquisitions_total";
const ACQUIRE_WAIT: &str = "lock_acquire_wait_seconds";
const HOLD: &str = "lock_hold_seconds";
const HELD: &str = "lock_held";
const RENEWALS: &str = "lock_renewals_total";
const LOST: &str = "lock_lost_total";
const OVERRUNS: &str = "lock_overruns_total";
const RELEASE_FAILURES: &str = "lock_release_failures_total";

static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Gives every metric its unit and description, on the installed recorder.
/// Call it once, after installing the recorder; recording works without it.
pub fn describe() {
    let counters = [
        (
            ACQUISITIONS,
            "Lock acquisitions, by outcome: acquired, contended or error.",
        ),
        (RENEWALS, "Successful renewals of a running job's lease."),
        (LOST, "Leases lost while their work ran."),
        (
            OVERRUNS,
            "Releases that found the lease already gone: the work outlived its TTL.",
        ),
        (
            RELEASE_FAILURES,
            "Releases the store failed; each is tried again in the background until the store answers or the TTL passes.",
        ),
    ];
    metrics::with_recorder(|recorder| {
        for (name, description) in counters {
            recorder.describe_counter(name.into(), Some(Unit::Count), description.into());
        }
        recorder.describe_histogram(
            ACQUIRE_WAIT.into(),
            Some(Unit::Seconds),
            "Time from asking for a lock to the outcome, waiting included.".into(),
        );
        recorder.describe_histogram(
            HOLD.into(),
            Some(Unit::Seconds),
            "Time a lease was held, until released, kept or dropped.".into(),
        );
        recorder.describe_gauge(
            HELD.into(),
            Some(Unit::Count),
            "Leases this process holds right now.".into(),
        );
    });
}

/// The metric keys of one (lock label, store) pair, made once and kept for
/// the life of the process (their number is bounded by the declared
/// templates and runtime labels, all `'static`): a key hashes its name and
/// labels when it is made, which would cost more than the update itself.
struct Keys {
    lock: &'static str,
    store: &'static str,
    /// Acquisitions and their wait, by outcome: acquired, contended, error.
    acquisitions: [Key; 3],
    waits: [Key; 3],
    hold: Key,
    held: Key,
    renewals: Key,
    lost: Key,
    overruns: Key,
    release_failures: Key,
}

/// The labels a lock's metrics carry: cheap to copy, made once per
/// (lock label, store) pair.
#[derive(Clone, Copy)]
pub(crate) struct Labels(&'static Keys);

thread_local! {
    /// The pairs this thread has used: a lookup is a short scan without a lock.
    static SEEN: RefCell<Vec<Labels>> = const { RefCell::new(Vec::new()) };
}

/// Every pair made so far.
static MADE: Mutex<Vec<Labels>> = Mutex::new(Vec::new());

impl Labels {
    /// The labels of a lock labelled `lock` (or [`UNLABELLED`]) on `store`.
    pub(crate) fn of(lock: Option<&'static str>, store: &'static str) -> Labels {
        let lock = lock.unwrap_or(UNLABELLED);
        let find = |made: &[Labels]| {
            made.iter()
                .copied()
                .find(|labels| labels.0.lock == lock && labels.0.store == store)
        };
        SEEN.with(|seen| {
            if let Some(found) = find(&seen.borrow()) {
                return found;
            }
            let labels = {
                let mut made = MADE.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                find(&made).unwrap_or_else(|| {
                    let labels = Labels::make(lock, store);
                    made.push(labels);
                    labels
                })
            };
            seen.borrow_mut().push(labels);
            labels
        })
    }

    /// The labels of a lock labelled `lock` on `store`.
    #[inline]
    pub(crate) fn of_store(lock: Option<&'static str>, store: &dyn LockStore) -> Labels {
        Labels::of(lock, store.name())
    }

    fn make(lock: &'static str, store: &'static str) -> Labels {
        let leak =
            |labels: Vec<Label>| -> &'static [Label] { Box::leak(labels.into_boxed_slice()) };
        let plain = leak(vec![
            Label::from_static_parts("lock", lock),
            Label::from_static_parts("store", store),
        ]);
        let by_outcome = ["acquired", "contended", "error"].map(|outcome| {
            leak(vec![
                Label::from_static_parts("lock", lock),
                Label::from_static_parts("store", store),
                Label::from_static_parts("outcome", outcome),
            ])
        });
        let key = |name: &'static str| Key::from_static_parts(name, plain);
        Labels(Box::leak(Box::new(Keys {
            lock,
            store,
            acquisitions: by_outcome.map(|set| Key::from_static_parts(ACQUISITIONS, set)),
            waits: by_outcome.map(|set| Key::from_static_parts(ACQUIRE_WAIT, set)),
            hold: key(HOLD),
            held: key(HELD),
            renewals: key(RENEWALS),
            lost: key(LOST),
            overruns: key(OVERRUNS),
            release_failures: key(RELEASE_FAILURES),
        })))
    }
}

fn count(key: &Key) {
    metrics::with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
}

fn seconds(key: &Key, duration: Duration) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_histogram(key, &METADATA)
            .record(duration.as_secs_f64());
    });
}

/// An acquisition begun at `started` came to `acquired` (`Some(true)`:
/// acquired, `Some(false)`: contended, `None`: an error) now.
pub(crate) fn acquisition(labels: Labels, acquired: Option<bool>, started: Instant) {
    let outcome = match acquired {
        Some(true) => 0,
        Some(false) => 1,
        None => 2,
    };
    count(&labels.0.acquisitions[outcome]);
    seconds(&labels.0.waits[outcome], started.elapsed());
}

/// A lease was taken: one more held.
pub(crate) fn taken(labels: Labels) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_gauge(&labels.0.held, &METADATA)
            .increment(1.0);
    });
}

/// A guard let its lease go (released, kept or dropped), held since
/// `started`.
pub(crate) fn let_go(labels: Labels, started: Instant) {
    metrics::with_recorder(|recorder| {
        recorder
            .register_gauge(&labels.0.held, &METADATA)
            .decrement(1.0);
    });
    seconds(&labels.0.hold, started.elapsed());
}

/// A give-back came to `released`: `Ok(false)` is an overrun, an error a
/// failed release.
pub(crate) fn released(labels: Labels, released: &Result<bool>) {
    match released {
        Ok(true) => {}
        Ok(false) => count(&labels.0.overruns),
        Err(_) => count(&labels.0.release_failures),
    }
}

/// Running work's lease was renewed.
pub(crate) fn renewed(labels: Labels) {
    count(&labels.0.renewals);
}

/// Running work's lease was lost.
pub(crate) fn lost(labels: Labels) {
    count(&labels.0.lost);
}
