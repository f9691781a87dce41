//! The store contract suite, on a map server started for each test.

mod common;

lock_tests::store_contract!(common::manager());
