//! The store contract suite on a real etcd member (lease times scaled to its
//! whole-second, at-least-2-second leases: see `contract::ms`).

lock_tests::store_contract!(lock_tests::etcd::etcd_manager());
