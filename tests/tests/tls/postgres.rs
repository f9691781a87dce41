//! postgres over TLS.
