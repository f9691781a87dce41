//! The store contract suite on a real memcached server (lease times scaled
//! to its whole-second TTLs: see `lock_test_kit::ms`).

lock_test_kit::store_contract!(lock_tests::memcached::memcached_manager());
