//! What the suites' macros expand to call. Not public API: names and
//! signatures here change whenever the macros need them to.

use std::future::Future;

/// Runs one generated test to its end on a tokio runtime of its own, built
/// as `#[tokio::test(flavor = "multi_thread", worker_threads = 2)]` builds
/// one, so the crate using the macros needs no tokio features of its own.
pub fn run(test: impl Future<Output = ()>) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime for the test")
        // Boxed, so a large suite future lives on the heap, not on the test
        // thread's stack.
        .block_on(Box::pin(test));
}

/// One `#[test]` per behaviour named, each calling
/// `$crate::$suite::$behaviour` on an [`isolated`](crate::isolated) manager
/// from `$make`, or returning at once when `$make` yields `None`.
#[doc(hidden)]
#[macro_export]
macro_rules! __behaviours {
    ($suite:ident, $make:expr; $($behaviour:ident),* $(,)?) => {
        $(
            #[test]
            fn $behaviour() {
                $crate::__private::run(async {
                    let ::core::option::Option::Some(manager) = $make.await else {
                        return;
                    };
                    $crate::$suite::$behaviour($crate::isolated(manager)).await;
                });
            }
        )*
    };
}
