//! Both suites on a store kept outside lock-core, through the macros alone,
//! as a store's own crate runs them: [`Instrumented`] over a memory store is
//! such a store, built on lock-core's public store API and nothing else.
//! lock-core's own stores run the suites in the workspace's `tests` crate.

use std::sync::Arc;

use lock_core::{LockManager, MemoryStore};
use lock_test_kit::Instrumented;

/// A fresh store for every test, as a networked store's connection would be.
fn outside_store() -> LockManager {
    LockManager::new(Instrumented::new(Arc::new(MemoryStore::new())))
}

lock_test_kit::store_contract!(async { Some(outside_store()) });
lock_test_kit::lifecycle_contract!(async { Some(outside_store()) });
