//! The store contract suite on a single Redis server.

lock_tests::store_contract!(lock_tests::harness::redis_manager());
