//! The lease lifecycle suite on the in-process memory store.

lock_test_kit::lifecycle_contract!(async { Some(lock_core::LockManager::memory()) });
