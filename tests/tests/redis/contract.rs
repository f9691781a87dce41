//! The store contract suite on a single Redis server.

lock_test_kit::store_contract!(lock_tests::harness::redis_manager());
