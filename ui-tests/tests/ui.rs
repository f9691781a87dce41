//! Runs the compile-fail cases under `tests/ui/fail/`: each file is one
//! misuse of `#[locked]`, and its `.stderr` is the exact output it must give.
//!
//! After changing a message, regenerate with `TRYBUILD=overwrite cargo test
//! -p lock-ui-tests --test ui`, then read every changed `.stderr`: the message
//! must be ours, say the fix, and point at the offending token.

// Misuse caught by the compiler, in our words and at the right token, is the
// attribute's whole promise to users who get it wrong; a change in any
// message or span must be a deliberate, reviewed change of these files.
#[test]
fn each_misuse_of_locked_fails_to_compile_with_a_message_that_says_the_fix() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
}

// #[locked] above #[tokio::main] compiles and runs: `main` must be its own
// program, so it is a trybuild pass case.
#[test]
fn locked_above_tokio_main_compiles_and_runs() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/main/*.rs");
}
