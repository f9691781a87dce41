//! Leader election: the election suite on every store, one module each.
//! (Failover across processes is `elections_failover`, a binary of its
//! own.)

mod memory {
    lock_test_kit::election_contract!(async { Some(lock_core::LockManager::memory()) });
}

mod redis {
    lock_test_kit::election_contract!(lock_tests::harness::redis_manager());
}

mod redis_cluster {
    lock_test_kit::election_contract!(lock_tests::harness::cluster_manager());
}

/// Through Sentinel, every lease write acknowledged by the replica.
mod redis_sentinel {
    lock_test_kit::election_contract!(lock_tests::sentinel::sentinel_manager_with(
        lock_core::RedisConfig::new().replica_acks(1, std::time::Duration::from_secs(1))
    ));
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
