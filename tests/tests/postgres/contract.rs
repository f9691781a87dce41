//! The store contract suite on a real PostgreSQL server.

lock_test_kit::store_contract!(lock_tests::postgres::postgres_manager());
