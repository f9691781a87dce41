//! The time bound on every call a networked store makes.
//!
//! A store that waits on a socket with no bound hangs its caller for as long
//! as the server (or the network) stays silent. Every call here has one
//! deadline, set when the call starts: the whole call, retries included
//! (a reloaded script, a redirected request), must fit in it.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// Why a bounded call failed: the store's own error, or no answer in time.
#[derive(Debug)]
pub enum CallError<E> {
    /// The store answered with an error.
    Store(E),
    /// No answer within the call's bound: the bound, and the setting that
    /// sets it (for the message).
    TimedOut(Duration, &'static str),
}

impl<E: fmt::Display> fmt::Display for CallError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Store(e) => write!(f, "{e}"),
            CallError::TimedOut(after, setting) => write!(
                f,
                "no answer within {after:?} (raise {setting} if the server is just slow)"
            ),
        }
    }
}

/// Transparent over the store's error: a `CallError::Store` shows that
/// error as its own message and passes on its causes, so an error chain
/// reads it once.
impl<E: std::error::Error + 'static> std::error::Error for CallError<E> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CallError::Store(e) => e.source(),
            CallError::TimedOut(..) => None,
        }
    }
}

/// The error type of stores whose calls mix several error types (a pool's
/// and a driver's).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl CallError<BoxError> {
    /// The error itself (or the time-out, as text): `Box<dyn Error>` is not
    /// an `Error` of its own, so it cannot be wrapped as one.
    pub fn into_boxed(self) -> BoxError {
        match self {
            CallError::Store(error) => error,
            timed_out => timed_out.to_string().into(),
        }
    }
}

/// One call's deadline: `timeout` from when it was started.
#[derive(Clone, Copy, Debug)]
pub struct Deadline {
    /// `None`: a timeout too long to represent (`Duration::MAX`), which
    /// means no bound at all.
    at: Option<Instant>,
    timeout: Duration,
    setting: &'static str,
}

impl Deadline {
    /// A deadline `timeout` from now; `setting` names the configuration
    /// that sets `timeout`, for the error message. A timeout past what the
    /// clock can represent (`Duration::MAX`) is no bound, never a panic.
    pub fn after(timeout: Duration, setting: &'static str) -> Self {
        Deadline {
            at: Instant::now().checked_add(timeout),
            timeout,
            setting,
        }
    }

    /// Runs `work` unless the deadline passes first.
    pub async fn bound<T, E>(
        self,
        work: impl Future<Output = Result<T, E>>,
    ) -> Result<T, CallError<E>> {
        let Some(at) = self.at else {
            return work.await.map_err(CallError::Store);
        };
        match tokio::time::timeout_at(at, work).await {
            Ok(result) => result.map_err(CallError::Store),
            Err(_) => Err(CallError::TimedOut(self.timeout, self.setting)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A store hands a bounded call's error to `Error::store`; the log line
    // then reads "acquire on lock:a failed: connection refused", once, not
    // "...: connection refused: connection refused".
    #[test]
    fn a_store_error_is_shown_once_in_the_error_chain() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused here");
        let error = crate::Error::store("acquire", "lock:a", CallError::Store(refused));
        let shown = error.chain().to_string();
        assert_eq!(shown.matches("refused here").count(), 1, "{shown}");
    }

    // A retry must get what is left of the call's time, not a fresh bound:
    // two steps of 600 ms under one 1 s deadline time out, in virtual time.
    #[tokio::test(start_paused = true)]
    async fn every_step_of_a_call_shares_its_one_deadline() {
        let step = || async {
            tokio::time::sleep(Duration::from_millis(600)).await;
            Ok::<_, std::io::Error>(())
        };
        let deadline = Deadline::after(Duration::from_secs(1), "the timeout");
        let started = Instant::now();
        deadline.bound(step()).await.expect("the first step fits");
        let second = deadline.bound(step()).await;
        assert!(
            matches!(second, Err(CallError::TimedOut(..))),
            "the second does not: {second:?}"
        );
        assert_eq!(
            started.elapsed(),
            Duration::from_secs(1),
            "the call ended at its deadline"
        );
    }

    // A user who wants no time bound says `timeout(Duration::MAX)`; adding
    // that to the clock overflows, which must mean "no bound", not a panic
    // in every call.
    #[tokio::test(start_paused = true)]
    async fn a_timeout_too_long_to_represent_is_no_bound_not_a_panic() {
        let deadline = Deadline::after(Duration::MAX, "the timeout");
        let slow = async {
            tokio::time::sleep(Duration::from_secs(365 * 24 * 3600)).await;
            Ok::<_, std::io::Error>("answered")
        };
        let answered = deadline.bound(slow).await.expect("no bound: it waits");
        assert_eq!(answered, "answered");
    }
}
