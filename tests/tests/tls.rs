//! Every networked store over TLS, against servers the tests start with
//! certificates they make (`lock_tests::certs`): the contract suite over
//! TLS, and a wrong CA or a missing client certificate refused at connect
//! with a message that names the cause.

#[path = "tls/etcd.rs"]
mod etcd;
#[path = "tls/memcached.rs"]
mod memcached;
#[path = "tls/postgres.rs"]
mod postgres;
#[path = "tls/redis.rs"]
mod redis;
