//! The store contract suite, on a map server started for each test.

mod common;

lock_test_kit::store_contract!(common::manager());
