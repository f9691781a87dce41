//! Compile-fail and compile-pass cases for `#[locked]`.
//!
//! The cases live under `tests/ui/`:
//!
//! - `fail/` holds one file per misuse, each with the exact compiler output
//!   it must produce (`.stderr`); `tests/ui.rs` checks them with trybuild.
//! - `pass/` holds programs that must compile, pass clippy with
//!   `-D warnings`, and run. Each is a test target here (edition 2024) and in
//!   `edition2021/` (edition 2021), so `cargo test --workspace` runs them on
//!   both editions and `cargo clippy --workspace --all-targets` lints the code
//!   the attribute generates in a user crate.
