//! The lease lifecycle suite on a real PostgreSQL server.

lock_test_kit::lifecycle_contract!(lock_tests::postgres::postgres_manager());
