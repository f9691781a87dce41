//! memcached over TLS.
