//! The lease lifecycle suite, on a map server started for each test. No
//! fencing: the fencing behaviour checks that a fenced lock is refused.

mod common;

lock_test_kit::lifecycle_contract!(common::manager());
