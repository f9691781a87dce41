//! The `metrics` feature: a small run under a recorder of this test's own,
//! and the numbers it must show. Labels carry the declared name template,
//! never the rendered name.
//!
//! The feature is lock-tests' own `metrics` (README's test command enables
//! it), so that the benchmark measures lock-core's default build; without
//! it this test says loudly that it did not run, and fails under `CI=true`.

#[cfg(feature = "metrics")]
#[path = "metrics/recorded.rs"]
mod recorded;

#[cfg(not(feature = "metrics"))]
#[test]
fn runs_only_with_the_metrics_feature() {
    let how = "lock-tests was built without its `metrics` feature; \
               run `cargo test --workspace --features lock-tests/metrics` (README's test command)";
    assert!(
        !std::env::var("CI").is_ok_and(|ci| ci == "true"),
        "under CI=true the metrics test must run: {how}"
    );
    eprintln!("\n!!! SKIPPED: the metrics test: {how}\n");
}
