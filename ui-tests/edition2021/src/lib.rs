//! The `#[locked]` compile-pass cases of `ui-tests`, built, linted and run
//! on edition 2021: the code the attribute generates must work on both
//! editions a user crate may use.
