//! The store contract suite on a real etcd member (lease times scaled to its
//! whole-second, at-least-2-second leases: see `lock_test_kit::ms`).

lock_test_kit::store_contract!(lock_tests::etcd::etcd_manager());
