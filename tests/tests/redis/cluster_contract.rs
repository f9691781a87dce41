//! The store contract suite on a three-primary Redis Cluster.

lock_test_kit::store_contract!(lock_tests::harness::cluster_manager());
