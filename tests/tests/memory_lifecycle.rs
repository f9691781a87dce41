//! The lease lifecycle suite on the in-process memory store.

lock_tests::lifecycle_contract!(async { Some(lock_core::LockManager::memory()) });
