//! The store contract suite on a real memcached server (lease times scaled
//! to its whole-second TTLs: see `contract::ms`).

lock_tests::store_contract!(lock_tests::memcached::memcached_manager());
