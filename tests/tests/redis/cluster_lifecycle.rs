//! The lease lifecycle suite on a three-primary Redis Cluster.

lock_test_kit::lifecycle_contract!(lock_tests::harness::cluster_manager());
