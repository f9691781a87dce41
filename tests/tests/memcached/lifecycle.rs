//! The lease lifecycle suite on a real memcached server. Fencing is not
//! offered there (eviction could reset a counter); the fencing behaviour
//! checks that a fenced lock is refused instead.

lock_test_kit::lifecycle_contract!(lock_tests::memcached::memcached_manager());
