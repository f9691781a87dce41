//! The election suite on every store, one module each, in one test binary.

mod memory {
    lock_test_kit::election_contract!(async { Some(lock_core::LockManager::memory()) });
}

mod redis {
    lock_test_kit::election_contract!(lock_tests::harness::redis_manager());
}

mod redis_cluster {
    lock_test_kit::election_contract!(lock_tests::harness::cluster_manager());
}

mod postgres {
    lock_test_kit::election_contract!(lock_tests::postgres::postgres_manager());
}

mod etcd {
    lock_test_kit::election_contract!(lock_tests::etcd::etcd_manager());
}

mod memcached {
    lock_test_kit::election_contract!(lock_tests::memcached::memcached_manager());
}
