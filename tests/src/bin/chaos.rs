//! The fault harness: the lease promises measured under injected faults.
//!
//! ```text
//! cargo run -p lock-tests --release --bin chaos -- --store <store> --duration 60s [--seed N] [--json FILE]
//! ```
//!
//! See [`lock_tests::chaos`] for what it runs and what the report means.
//! `chaos worker` is one of its worker processes (started by the harness,
//! configured through the environment).

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let status = match args.first().map(String::as_str) {
        Some("worker") => lock_tests::chaos::worker::main(),
        _ => lock_tests::chaos::run::main(&args),
    };
    std::process::exit(status);
}
