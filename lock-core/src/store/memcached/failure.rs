//! Why a memcached request failed: its connection broke or went silent,
//! the server answered with an error, or the server is one the store
//! cannot use. Its `Display` is the reason an
//! [`Error::Store`](crate::Error::Store) gives.

use std::fmt;
use std::io;

/// A request's failure: the connection's, or the server's answer.
#[derive(Debug)]
pub(crate) enum Failure {
    Io(io::Error),
    /// A connection could not be opened, for a reason that comes with what
    /// to do about it (a TLS failure...): the whole message.
    Connect(String),
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`, or an unreadable
    /// reply.
    Protocol(String),
    /// The server is not a memcached the store can use (too old, or it
    /// would not say its version): the whole message.
    Unsupported(String),
    /// A reply that does not answer the request it was read for: the
    /// connection is out of step, and was closed. The request's outcome is
    /// unknown.
    OutOfStep(String),
    /// The request was for a session that has since been closed; it was not
    /// sent.
    Reopened,
    /// The connection's task is gone (the store was dropped).
    Closed,
}

impl Failure {
    /// The same failure, for another request of the batch.
    pub(super) fn again(&self) -> Failure {
        match self {
            Failure::Io(e) => Failure::Io(io::Error::new(e.kind(), e.to_string())),
            Failure::Connect(why) => Failure::Connect(why.clone()),
            Failure::Protocol(line) => Failure::Protocol(line.clone()),
            Failure::Unsupported(why) => Failure::Unsupported(why.clone()),
            Failure::OutOfStep(why) => Failure::OutOfStep(why.clone()),
            Failure::Reopened => Failure::Reopened,
            Failure::Closed => Failure::Closed,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Io(e) => write!(f, "memcached connection: {e}"),
            Failure::Connect(why) => write!(f, "memcached connection: {why}"),
            Failure::Protocol(line) => write!(f, "memcached answered {line:?}"),
            Failure::Unsupported(why) => f.write_str(why),
            Failure::OutOfStep(why) => write!(
                f,
                "the memcached connection was out of step ({why}): it was closed, and the next call opens a new one; whether this call took effect is unknown"
            ),
            Failure::Reopened => f.write_str(
                "the memcached connection was reopened after the read this write depends on",
            ),
            Failure::Closed => f.write_str("the memcached connection was closed"),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Failure::Io(e) => Some(e),
            _ => None,
        }
    }
}
