//! The lease lifecycle suite on a three-primary Redis Cluster.

lock_tests::lifecycle_contract!(lock_tests::harness::cluster_manager());
