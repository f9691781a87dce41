//! The lease lifecycle suite on a real etcd member.

lock_test_kit::lifecycle_contract!(lock_tests::etcd::etcd_manager());
