//! The store contract suite through `redis+sentinel://`: a primary, a
//! replica and three sentinels started once for this test binary.

/// Sentinel finds the primary; the contract holds there as on one server.
mod through_sentinel {
    lock_test_kit::store_contract!(lock_tests::sentinel::sentinel_manager());
}

/// The same contract with every lease write acknowledged by the replica
/// (`replica_acks(1, 1s)`): the acknowledgement changes when a call
/// returns, never what it means.
mod with_replica_acks {
    lock_test_kit::store_contract!(lock_tests::sentinel::sentinel_manager_with(
        lock_core::RedisConfig::new().replica_acks(1, std::time::Duration::from_secs(1))
    ));
}
