//! The lease lifecycle suite on a single Redis server.

lock_tests::lifecycle_contract!(lock_tests::harness::redis_manager());
