//! The lease lifecycle suite on a real etcd member.

lock_tests::lifecycle_contract!(lock_tests::etcd::etcd_manager());
