//! The store contract suite on the in-process memory store.

lock_test_kit::store_contract!(async { Some(lock_core::LockManager::memory()) });
