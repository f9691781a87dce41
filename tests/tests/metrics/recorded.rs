//! The run under a recorder and the numbers it must show (see `../metrics.rs`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{Error, LockManager, MemoryStore, OnLost, locked, registry};
use lock_test_kit::Instrumented;
use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// `name{label=value,...}`, labels sorted.
fn series(name: &str, labels: &[(&str, &str)]) -> String {
    let mut labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    labels.sort();
    format!("{name}{{{}}}", labels.join(","))
}

#[derive(Default)]
struct Value {
    count: AtomicU64,
    gauge: Mutex<f64>,
    samples: Mutex<Vec<f64>>,
}

impl CounterFn for Value {
    fn increment(&self, value: u64) {
        self.count.fetch_add(value, Ordering::SeqCst);
    }
    fn absolute(&self, value: u64) {
        self.count.store(value, Ordering::SeqCst);
    }
}

impl GaugeFn for Value {
    fn increment(&self, value: f64) {
        *self.gauge.lock().expect("gauge") += value;
    }
    fn decrement(&self, value: f64) {
        *self.gauge.lock().expect("gauge") -= value;
    }
    fn set(&self, value: f64) {
        *self.gauge.lock().expect("gauge") = value;
    }
}

impl HistogramFn for Value {
    fn record(&self, value: f64) {
        self.samples.lock().expect("samples").push(value);
    }
}

/// Every series this test's run touched, and what it got.
#[derive(Default)]
struct Recorded {
    series: Mutex<BTreeMap<String, Arc<Value>>>,
    units: Mutex<BTreeMap<String, Unit>>,
}

impl Recorded {
    fn value(&self, key: &Key) -> Arc<Value> {
        let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
        let name = series(key.name(), &labels);
        Arc::clone(self.series.lock().expect("series").entry(name).or_default())
    }

    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<Arc<Value>> {
        self.series
            .lock()
            .expect("series")
            .get(&series(name, labels))
            .cloned()
    }

    fn count(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.get(name, labels)
            .map_or(0, |value| value.count.load(Ordering::SeqCst))
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .map_or(0.0, |value| *value.gauge.lock().expect("gauge"))
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.get(name, labels).map_or_else(Vec::new, |value| {
            value.samples.lock().expect("samples").clone()
        })
    }

    fn names(&self) -> Vec<String> {
        self.series
            .lock()
            .expect("series")
            .keys()
            .cloned()
            .collect()
    }
}

struct TestRecorder(Arc<Recorded>);

impl Recorder for TestRecorder {
    fn describe_counter(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.describe(key, unit);
    }
    fn describe_gauge(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.describe(key, unit);
    }
    fn describe_histogram(&self, key: KeyName, unit: Option<Unit>, _: SharedString) {
        self.describe(key, unit);
    }
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.value(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.0.value(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.0.value(key))
    }
}

impl TestRecorder {
    fn describe(&self, key: KeyName, unit: Option<Unit>) {
        if let Some(unit) = unit {
            self.0
                .units
                .lock()
                .expect("units")
                .insert(key.as_str().to_owned(), unit);
        }
    }
}

const TEMPLATE: &str = "reports:{tenant}";

#[locked(name = "reports:{tenant}", ttl = "10s")]
async fn build_report(tenant: &str, recorded: Arc<Recorded>) -> Result<f64, Error> {
    tokio::time::sleep(Duration::from_millis(20)).await;
    // Inside the body: this process holds one lease of this template.
    let _ = tenant;
    Ok(recorded.gauge("lock_held", &[("lock", TEMPLATE), ("store", "memory")]))
}

// A current-thread runtime: every task of the run is on this thread, where
// the recorder is installed.
#[tokio::test]
async fn a_small_run_is_counted_timed_and_labelled_by_template() {
    let recorded = Arc::new(Recorded::default());
    let recorder = TestRecorder(Arc::clone(&recorded));
    let _installed = metrics::set_default_local_recorder(&recorder);
    lock_core::metrics::describe();

    let store = Instrumented::new(Arc::new(MemoryStore::new()));
    let locks = LockManager::new(store.clone());
    let template = [("lock", TEMPLATE), ("store", "memory")];
    let acquired = [
        ("lock", TEMPLATE),
        ("store", "memory"),
        ("outcome", "acquired"),
    ];
    let contended = [
        ("lock", TEMPLATE),
        ("store", "memory"),
        ("outcome", "contended"),
    ];

    registry::with_manager(locks.clone(), async {
        // Two tenants, two rendered names, one template.
        for tenant in ["acme", "globex"] {
            let held_inside = build_report(tenant, Arc::clone(&recorded))
                .await
                .expect("run")
                .expect("free");
            assert_eq!(held_inside, 1.0, "one lease held while the body runs");
        }
        // Somebody (a runtime lock, unlabelled) holds acme: contended.
        let guard = locks
            .lock("reports:acme", Duration::from_secs(10))
            .acquire()
            .await
            .expect("acquire")
            .expect("free");
        let skipped = build_report("acme", Arc::clone(&recorded))
            .await
            .expect("run");
        assert_eq!(skipped, None);
        guard.release().await.expect("release");
    })
    .await;

    assert_eq!(recorded.count("lock_acquisitions_total", &acquired), 2);
    assert_eq!(recorded.count("lock_acquisitions_total", &contended), 1);
    assert_eq!(
        recorded.count(
            "lock_acquisitions_total",
            &[
                ("lock", "unlabelled"),
                ("store", "memory"),
                ("outcome", "acquired")
            ]
        ),
        1,
        "a runtime lock without a label"
    );
    assert_eq!(
        recorded
            .samples("lock_acquire_wait_seconds", &acquired)
            .len(),
        2
    );
    let holds = recorded.samples("lock_hold_seconds", &template);
    assert_eq!(holds.len(), 2, "one hold time per run: {holds:?}");
    assert!(
        holds.iter().all(|&s| s >= 0.02),
        "each body slept 20 ms: {holds:?}"
    );
    assert_eq!(
        recorded.gauge("lock_held", &template),
        0.0,
        "all given back"
    );
    assert!(
        recorded
            .names()
            .iter()
            .all(|name| !name.contains("acme") && !name.contains("globex")),
        "a rendered name leaked into the labels: {:?}",
        recorded.names()
    );

    // Renewals, then a lease lost under OnLost::Cancel.
    let renewing = [("lock", "renewing"), ("store", "memory")];
    let ran = locks
        .lock("renewing", Duration::from_millis(60))
        .label("renewing")
        .renew()
        .run(async {
            tokio::time::sleep(Duration::from_millis(150)).await;
            Ok::<_, Error>(())
        })
        .await
        .expect("run");
    assert_eq!(ran, Some(()));
    assert!(
        recorded.count("lock_renewals_total", &renewing) >= 2,
        "renewed every 20 ms"
    );
    let losing = [("lock", "losing"), ("store", "memory")];
    let lost = locks
        .lock("losing", Duration::from_millis(30))
        .label("losing")
        .on_lost(OnLost::Cancel)
        .run(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok::<_, Error>(())
        })
        .await;
    assert!(matches!(lost, Err(Error::LeaseLost { .. })), "{lost:?}");
    assert_eq!(recorded.count("lock_lost_total", &losing), 1);

    // An overrun, then a failed release.
    let overrun = [("lock", "overrun"), ("store", "memory")];
    let guard = locks
        .lock("overrun", Duration::from_millis(10))
        .label("overrun")
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(!guard.release().await.expect("release"), "overran");
    assert_eq!(recorded.count("lock_overruns_total", &overrun), 1);
    let failing = [("lock", "failing"), ("store", "memory")];
    let guard = locks
        .lock("failing", Duration::from_secs(10))
        .label("failing")
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    store.fail_releases(true);
    assert!(guard.release().await.is_err());
    store.fail_releases(false);
    assert_eq!(recorded.count("lock_release_failures_total", &failing), 1);

    // An error outcome: an empty name.
    let bad = locks
        .lock("", Duration::from_secs(1))
        .label("bad")
        .acquire()
        .await;
    assert!(bad.is_err());
    assert_eq!(
        recorded.count(
            "lock_acquisitions_total",
            &[("lock", "bad"), ("store", "memory"), ("outcome", "error")]
        ),
        1
    );

    let units = recorded.units.lock().expect("units").clone();
    assert_eq!(units.get("lock_hold_seconds"), Some(&Unit::Seconds));
    assert_eq!(units.get("lock_acquire_wait_seconds"), Some(&Unit::Seconds));
    assert_eq!(units.get("lock_acquisitions_total"), Some(&Unit::Count));
}
