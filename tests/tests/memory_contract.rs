//! The store contract suite on the in-process memory store.

lock_tests::store_contract!(async { Some(lock_core::LockManager::memory()) });
