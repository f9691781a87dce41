//! The lease lifecycle suite on a single Redis server.

lock_test_kit::lifecycle_contract!(lock_tests::harness::redis_manager());
