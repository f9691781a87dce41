//! The store contract suite on a three-primary Redis Cluster.

lock_tests::store_contract!(lock_tests::harness::cluster_manager());
