//! etcd over TLS.
