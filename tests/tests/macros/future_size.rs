//! The futures `#[locked]` functions return stay small: one layer adds at
//! most a small constant to its body's future, however large the body, and
//! nested locked calls grow by that constant per layer, not by a factor.
//!
//! A future lives wherever it is awaited: on the stack of `block_on`, inside
//! its caller's future, inside a spawned task. A wrapper that copies its
//! body's future into several nested state machines multiplies its size at
//! every layer, and three nested locked calls once needed almost 900 KB,
//! overflowing a thread's stack at the first call in a debug build.

use std::time::Duration;

use lock_core::{Error, LockManager, locked, registry};

/// What one `#[locked]` layer may add to its body's future, in bytes.
const LAYER: usize = 1024;

/// Keeps a buffer of `N` bytes alive across an await, so the body's future
/// is at least `N` bytes: what a real body with a few large locals is like.
async fn busy<const N: usize>() -> usize {
    let buffer = [7u8; N];
    tokio::task::yield_now().await;
    buffer.iter().map(|&b| usize::from(b)).sum()
}

async fn body() -> Result<usize, Error> {
    Ok(busy::<1024>().await)
}

#[locked(name = "size:result", ttl = "30s")]
async fn locked_result() -> Result<usize, Error> {
    Ok(busy::<1024>().await)
}

#[locked(name = "size:plain", ttl = "30s")]
async fn locked_plain() -> usize {
    busy::<1024>().await
}

#[locked(name = "size:error", ttl = "30s", contended = "error")]
async fn locked_contended_error() -> Result<usize, Error> {
    Ok(busy::<1024>().await)
}

#[locked(
    name = "size:renew",
    ttl = "30s",
    wait = "2s",
    renew,
    on_lost = "cancel"
)]
async fn locked_renew_wait() -> Result<usize, Error> {
    Ok(busy::<1024>().await)
}

// Three nested layers of each form, unlocked and locked.
async fn plain_inner() -> Result<usize, Error> {
    body().await
}
async fn plain_middle() -> Result<usize, Error> {
    plain_inner().await
}
async fn plain_outer() -> Result<usize, Error> {
    plain_middle().await
}

#[locked(name = "nest:inner", ttl = "30s")]
async fn nested_inner() -> Result<usize, Error> {
    body().await
}
#[locked(name = "nest:middle", ttl = "30s")]
async fn nested_middle() -> Result<usize, Error> {
    Ok(nested_inner().await?.unwrap_or(0))
}
#[locked(name = "nest:outer", ttl = "30s")]
async fn nested_outer() -> Result<usize, Error> {
    Ok(nested_middle().await?.unwrap_or(0))
}

#[locked(name = "nest-e:inner", ttl = "30s", contended = "error")]
async fn nested_error_inner() -> Result<usize, Error> {
    body().await
}
#[locked(name = "nest-e:middle", ttl = "30s", contended = "error")]
async fn nested_error_middle() -> Result<usize, Error> {
    nested_error_inner().await
}
#[locked(name = "nest-e:outer", ttl = "30s", contended = "error")]
async fn nested_error_outer() -> Result<usize, Error> {
    nested_error_middle().await
}

#[locked(name = "nest-r:inner", ttl = "30s", wait = "1s", renew)]
async fn nested_renew_inner() -> Result<usize, Error> {
    body().await
}
#[locked(name = "nest-r:middle", ttl = "30s", wait = "1s", renew)]
async fn nested_renew_middle() -> Result<usize, Error> {
    Ok(nested_renew_inner().await?.unwrap_or(0))
}
#[locked(name = "nest-r:outer", ttl = "30s", wait = "1s", renew)]
async fn nested_renew_outer() -> Result<usize, Error> {
    Ok(nested_renew_middle().await?.unwrap_or(0))
}

#[test]
fn one_locked_layer_adds_at_most_a_small_constant_to_its_bodys_future() {
    let body = std::mem::size_of_val(&body());
    for (form, size) in [
        ("Result body", std::mem::size_of_val(&locked_result())),
        ("plain body", std::mem::size_of_val(&locked_plain())),
        (
            "contended = \"error\"",
            std::mem::size_of_val(&locked_contended_error()),
        ),
        (
            "wait, renew, on_lost",
            std::mem::size_of_val(&locked_renew_wait()),
        ),
    ] {
        assert!(
            size <= body + LAYER,
            "{form}: a locked future of {size} bytes around a {body}-byte body adds more than {LAYER}"
        );
    }
}

#[test]
fn three_nested_locked_calls_stay_within_three_layers_of_the_unlocked_nesting() {
    let unlocked = std::mem::size_of_val(&plain_outer());
    for (form, size) in [
        ("plain", std::mem::size_of_val(&nested_outer())),
        (
            "contended = \"error\"",
            std::mem::size_of_val(&nested_error_outer()),
        ),
        (
            "wait and renew",
            std::mem::size_of_val(&nested_renew_outer()),
        ),
    ] {
        assert!(
            size <= unlocked + 3 * LAYER,
            "{form}: three nested locked calls make a {size}-byte future, against {unlocked} bytes unlocked"
        );
    }
}

/// Lock errors the runtime's own API returns keep the same promise: `run`
/// and `run_or_contended` hold the work once.
#[test]
fn run_and_run_or_contended_hold_the_work_once() {
    let locks = LockManager::memory();
    let lock = locks.lock("size:run", Duration::from_secs(30));
    let work = body();
    let alone = std::mem::size_of_val(&work);
    let run = std::mem::size_of_val(&lock.run(body()));
    let contended = std::mem::size_of_val(&lock.run_or_contended(body()));
    drop(work);
    assert!(
        run <= alone + LAYER && contended <= alone + LAYER,
        "run: {run} bytes, run_or_contended: {contended} bytes, around a {alone}-byte work"
    );
}

/// The call that used to overflow: three nested locked calls, run to the
/// end on a thread with a 256 KiB stack (a debug build's frames included).
#[test]
fn three_nested_locked_calls_run_on_a_256_kib_stack() {
    let thread = std::thread::Builder::new()
        .name("small-stack".into())
        .stack_size(256 * 1024)
        .spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            runtime.block_on(registry::with_manager(LockManager::memory(), async {
                let plain = nested_outer().await.expect("memory store");
                let error = nested_error_outer().await.expect("memory store");
                let renew = nested_renew_outer().await.expect("memory store");
                (plain, error, renew)
            }))
        })
        .expect("spawn");
    let (plain, error, renew) = thread.join().expect("no stack overflow");
    assert_eq!(plain, Some(1024 * 7), "the plain nesting ran to the end");
    assert_eq!(error, 1024 * 7, "the contended = error nesting ran");
    assert_eq!(renew, Some(1024 * 7), "the renewing nesting ran");
}

/// The direct forms are ordinary locked functions too.
#[tokio::test]
async fn the_measured_functions_run_under_their_locks() {
    registry::with_manager(LockManager::memory(), async {
        assert_eq!(locked_result().await.expect("memory"), Some(7168));
        assert_eq!(locked_plain().await.expect("memory"), Some(7168));
        assert_eq!(locked_contended_error().await.expect("memory"), 7168);
        assert_eq!(locked_renew_wait().await.expect("memory"), Some(7168));
        assert_eq!(plain_outer().await.expect("plain"), 7168);
    })
    .await;
}
