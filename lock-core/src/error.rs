//! The one error type of the crate.

use std::time::Duration;

/// Everything that can go wrong while taking, keeping or giving back a lease.
///
/// Each message says what happened and what to do about it. The enum is
/// `#[non_exhaustive]`: match the variants you act on and keep a fallback arm.
///
/// Contention is *not* an error: [`Lock::acquire`](crate::Lock::acquire) returns
/// `Ok(None)` and [`Lock::run`](crate::Lock::run) returns `Ok(None)` when somebody
/// else holds the lock.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lock name is unusable (for example, empty).
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The name as given.
        name: String,
        /// Why it was refused and what to use instead.
        reason: &'static str,
    },

    /// The TTL is zero or longer than the store can keep.
    #[error("invalid ttl {ttl:?} for lock `{key}`: {reason}")]
    InvalidTtl {
        /// The key of the lock the TTL was given for.
        key: String,
        /// The TTL as given.
        ttl: Duration,
        /// Why it was refused and what to use instead.
        reason: String,
    },

    /// The store failed to carry out an operation (connection lost, timeout,
    /// protocol error...). The lock's state is whatever the store last recorded.
    ///
    /// The store's own error is the [`source`](std::error::Error::source),
    /// not repeated in this message: print the chain (as `anyhow` does, or
    /// with [`Error::chain`]) to see it.
    #[error(
        "lock store failed to {operation} `{key}`; check that the store is reachable, then retry"
    )]
    Store {
        /// What was being done: `"acquire"`, `"release"`, `"extend"`...
        operation: &'static str,
        /// The key it was done on.
        key: String,
        /// The store's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// Lock options that contradict each other (for example `at_least`
    /// longer than `ttl`, or `max_hold` without `renew`).
    #[error("invalid options for lock `{key}`: {reason}")]
    InvalidOptions {
        /// The key of the lock the options were given for.
        key: String,
        /// What is wrong and how to fix it.
        reason: String,
    },

    /// Somebody else held the lock, and the caller asked for that to be an
    /// error ([`Lock::run_or_contended`](crate::Lock::run_or_contended),
    /// `#[locked(contended = "error")]`).
    #[error(
        "lock `{key}` is held by someone else{}; retry later, or wait for it with a longer `wait`",
        .holder_remaining.map(|d| format!(" for up to {d:?} more")).unwrap_or_default()
    )]
    Contended {
        /// The key that was held.
        key: String,
        /// How long the holder's lease had left, when the store said.
        holder_remaining: Option<std::time::Duration>,
    },

    /// The lease ended while the work was still running (a renewal found it
    /// gone, or its deadline passed unrenewed), and the lock was set to cancel
    /// the work when that happens.
    #[error(
        "lost the lease on `{key}` after {held:?}: the work was cancelled so it cannot run alongside the next holder; use a longer ttl or `renew`"
    )]
    LeaseLost {
        /// The key whose lease was lost.
        key: String,
        /// How long the lease had been held when it was lost.
        held: std::time::Duration,
    },

    /// Fencing tokens were asked for on a store that cannot keep them.
    #[error(
        "lock `{key}` asks for fencing tokens, but its store cannot keep them; use a store that supports fencing (memory, Redis) or drop `fenced`"
    )]
    FencingUnsupported {
        /// The key of the lock.
        key: String,
    },

    /// The lock asks for its read side ([`Lock::read`](crate::Lock::read)),
    /// but its manager's store keeps no readers.
    #[error(
        "lock `{key}` asks for its read side, but the {store} store keeps no readers; take the plain lock (drop `read`) or use a store that keeps readers (memory, Redis, PostgreSQL)"
    )]
    ReadUnsupported {
        /// The key of the lock.
        key: String,
        /// The store's name ([`LockStore::name`](crate::LockStore::name)).
        store: &'static str,
    },

    /// The lock must exclude other processes, but its manager's store is
    /// per-process.
    #[error(
        "lock `{key}` must be shared across processes, but its manager's store is per-process; {hint}"
    )]
    NotShared {
        /// The key of the lock.
        key: String,
        /// What to do: install a manager over a shared store, or, where the
        /// lock was taken inside
        /// [`registry::with_manager`](crate::registry::with_manager) (a
        /// test), vouch for the test's manager with
        /// [`declared_shared`](crate::LockManager::declared_shared).
        hint: &'static str,
    },

    /// No manager to take the lock in: it uses the default manager
    /// ([`registry::manager`](crate::registry::manager), or `#[locked]`
    /// without `manager`), and none is installed. Locks fail closed rather
    /// than fall back to a per-process store, whose locks would not exclude
    /// the application's other processes.
    ///
    /// The message says what to install: `registry::install(lock_core::connect(url).await?)?`
    /// for locks that exclude every process of a fleet,
    /// `registry::install(LockManager::memory())?` for one process, and
    /// [`registry::with_manager`](crate::registry::with_manager) in tests;
    /// or, in a task spawned from inside `with_manager` (which does not
    /// inherit its override), that the task runs outside it.
    #[error("no lock manager to take lock `{key}` in: {reason}")]
    NoManager {
        /// The key of the lock (the prefix, for a listing).
        key: String,
        /// Why there is none here, and what to install.
        reason: &'static str,
    },

    /// The store cannot do what was asked (for example, memcached cannot
    /// list its keys).
    #[error("the {store} store cannot {operation}: {hint}")]
    Unsupported {
        /// The store, as [`LockStore::name`](crate::LockStore::name) gives it.
        store: &'static str,
        /// What was asked: `"list locks"`...
        operation: &'static str,
        /// What to do instead.
        hint: &'static str,
    },

    /// [`Lock::acquire`](crate::Lock::acquire) was called for a lock this
    /// task already holds through [`run`](crate::Lock::run) or `#[locked]`,
    /// or `run` for the other side of a name this task holds
    /// ([`Lock::read`](crate::Lock::read)): waiting would be waiting for
    /// itself.
    #[error(
        "lock `{key}` is already held by this task (a `run` or `#[locked]` body it runs in); waiting for it would wait for itself: call the work directly, or use `run`, which runs re-entered work under the lease already held when it is of the same side (a reader's lease never covers a writer's work, nor the reverse)"
    )]
    Reentrant {
        /// The key of the lock.
        key: String,
    },

    /// A lease write (an acquire or an extend) that fewer replicas
    /// acknowledged in time than the Redis store's
    /// `RedisConfig::replica_acks` asked for. An acquire that fails so has given its lease back; an extend
    /// counts as a failed renewal.
    #[error(
        "only {acked} of the {wanted} replicas asked for acknowledged the lease write in time; \
         check that the replicas are up and replicating (`INFO replication` on the primary), \
         raise the ack timeout, or ask for fewer with `RedisConfig::replica_acks`"
    )]
    NotReplicated {
        /// How many replicas acknowledged the write.
        acked: u32,
        /// How many were asked for.
        wanted: u32,
    },

    /// A store URL that [`connect`](crate::connect) cannot use: it has no
    /// scheme, or one no store takes, or it is malformed for the store its
    /// scheme names.
    #[error("cannot use the store URL `{url}`: {reason}")]
    InvalidUrl {
        /// The URL as the stores read it, written back with every
        /// password replaced by `***`; only its scheme when it cannot be
        /// read (a password may then be anywhere in it).
        url: String,
        /// What is wrong and what a good URL looks like.
        reason: String,
    },

    /// A store's configuration that cannot work, found before any
    /// connection is tried: a notification channel, schema or table name
    /// the store cannot use, a TLS file that is missing or holds no
    /// certificate, settings that contradict each other (`sslmode=disable`
    /// with a CA), a cluster given certificates it cannot use.
    ///
    /// Unlike [`Error::Store`], retrying does not help: the message itself
    /// says what is wrong and what to change, so a program that prints
    /// only an error's `Display` still shows the cause.
    #[error("the {store} store cannot use its configuration: {reason}")]
    InvalidConfig {
        /// The store, as [`LockStore::name`](crate::LockStore::name) gives it.
        store: &'static str,
        /// What is wrong and what to change.
        reason: String,
    },

    /// A store URL whose store this build of lock-core leaves out: the
    /// cargo feature that builds it is off.
    #[error(
        "`{scheme}://` URLs are for the {store} store, which this build of lock-core leaves out; \
         enable lock-core's `{feature}` feature"
    )]
    StoreNotBuilt {
        /// The URL's scheme, without `://`.
        scheme: String,
        /// The store it names.
        store: &'static str,
        /// The cargo feature of lock-core that builds it.
        feature: &'static str,
    },

    /// [`registry::install`](crate::registry::install) was called twice.
    #[error(
        "a default lock manager is already installed; install it once at startup, \
         use `registry::install_named` for more managers, or `registry::with_manager` in tests"
    )]
    AlreadyInstalled,

    /// [`registry::install_named`](crate::registry::install_named) was called twice with one name.
    #[error(
        "a lock manager named `{name}` is already installed; pick another name or install it once at startup"
    )]
    NameTaken {
        /// The name that is already taken.
        name: String,
    },

    /// [`registry::manager_named`](crate::registry::manager_named) found no manager of that name.
    #[error(
        "no lock manager named `{name}` is installed; call `lock_core::registry::install_named(\"{name}\", manager)` at startup"
    )]
    UnknownManager {
        /// The name that was asked for.
        name: String,
    },
}

impl Error {
    /// Wraps a store's own error, saying which operation on which key failed.
    ///
    /// Store implementations use this so every store error reads the same way.
    pub fn store(
        operation: &'static str,
        key: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::Store {
            operation,
            key: key.into(),
            source: source.into(),
        }
    }
}

impl Error {
    /// A configuration `store` cannot use, saying why and what to change
    /// ([`Error::InvalidConfig`]): for a store's checks of its settings and
    /// files, so that none of them reads as an outage.
    pub fn invalid_config(store: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidConfig {
            store,
            reason: reason.into(),
        }
    }
}

/// A lock error as an [`std::io::Error`], so `#[locked]` functions can
/// return `std::io::Result`: contention is
/// [`WouldBlock`](std::io::ErrorKind::WouldBlock); a bad name, TTL, option,
/// store URL or store configuration
/// [`InvalidInput`](std::io::ErrorKind::InvalidInput); a store
/// URL whose store the build leaves out
/// [`Unsupported`](std::io::ErrorKind::Unsupported); anything else
/// [`Other`](std::io::ErrorKind::Other). The lock error is kept inside
/// (`into_inner`, `get_ref`).
impl From<Error> for std::io::Error {
    fn from(error: Error) -> Self {
        use std::io::ErrorKind;
        let kind = match &error {
            Error::Contended { .. } => ErrorKind::WouldBlock,
            Error::InvalidName { .. }
            | Error::InvalidTtl { .. }
            | Error::InvalidOptions { .. }
            | Error::InvalidUrl { .. }
            | Error::InvalidConfig { .. } => ErrorKind::InvalidInput,
            Error::StoreNotBuilt { .. } => ErrorKind::Unsupported,
            _ => ErrorKind::Other,
        };
        std::io::Error::new(kind, error)
    }
}

impl Error {
    /// This error and each of its causes, as one line: `message: cause:
    /// cause's cause`. What logs should print, since a store error keeps
    /// its cause as the source rather than in its message.
    pub fn chain(&self) -> Chain<'_> {
        Chain(self)
    }
}

/// An error followed by its causes, from [`Error::chain`].
#[derive(Debug, Clone, Copy)]
pub struct Chain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    /// A cause whose text the level above already quotes is left out:
    /// client libraries' errors often repeat their own source's message
    /// (a refused connection's `io::Error`), and the line would say it
    /// twice.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut above = self.0.to_string();
        f.write_str(&above)?;
        let mut cause = self.0.source();
        while let Some(next) = cause {
            let said = next.to_string();
            if !above.contains(&said) {
                write!(f, ": {said}")?;
            }
            above = said;
            cause = next.source();
        }
        Ok(())
    }
}

/// `Result` with this crate's [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_std_error<T: std::error::Error + Send + Sync + 'static>() {}

    #[test]
    fn the_error_is_a_thread_safe_std_error() {
        assert_std_error::<Error>();
    }

    #[test]
    fn messages_read_as_sentences_without_stray_spaces() {
        let key = || "lock:k".to_owned();
        let errors = [
            Error::Contended {
                key: key(),
                holder_remaining: Some(std::time::Duration::from_secs(2)),
            },
            Error::LeaseLost {
                key: key(),
                held: std::time::Duration::from_secs(3),
            },
            Error::FencingUnsupported { key: key() },
            Error::ReadUnsupported {
                key: key(),
                store: "memcached",
            },
            Error::NotShared {
                key: key(),
                hint: crate::options::NOT_SHARED,
            },
            Error::NotShared {
                key: key(),
                hint: crate::options::NOT_SHARED_IN_OVERRIDE,
            },
            Error::NoManager {
                key: key(),
                reason: "none is installed",
            },
            Error::AlreadyInstalled,
            Error::UnknownManager { name: "x".into() },
            Error::invalid_config(
                "postgres",
                "the channel is empty; set PostgresConfig::channel",
            ),
        ];
        for error in errors {
            let text = error.to_string();
            assert!(!text.contains("  "), "stray spaces in {text:?}");
        }
    }

    #[test]
    fn a_store_error_names_the_operation_the_key_and_the_cause() {
        let err = Error::store("release", "lock:jobs", "connection reset");
        let text = err.to_string();
        assert!(text.contains("release"), "operation missing from {text:?}");
        assert!(text.contains("lock:jobs"), "key missing from {text:?}");
        let source = std::error::Error::source(&err).expect("the cause is the source");
        assert_eq!(source.to_string(), "connection reset");
        assert_eq!(
            err.chain().to_string(),
            format!("{text}: connection reset"),
            "the chain shows the cause once"
        );
    }

    // A program that prints only `Display`, or turns the error into an
    // `io::Error`, must still see a configuration error as one: its cause
    // in its own message, and not an outage to retry.
    #[test]
    fn a_configuration_error_says_its_cause_and_is_invalid_input() {
        let error = Error::invalid_config(
            "postgres",
            "the channel is empty; set PostgresConfig::channel",
        );
        let text = error.to_string();
        assert!(
            text.contains("postgres") && text.contains("the channel is empty"),
            "the store and the cause in the message itself: {text}"
        );
        assert!(
            std::error::Error::source(&error).is_none(),
            "nothing left for the source to say: {error:?}"
        );
        let io: std::io::Error = error.into();
        assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput, "not Other");
    }

    /// Every level of `err`'s chain, as `anyhow` prints them.
    fn levels(err: &(dyn std::error::Error + 'static)) -> Vec<String> {
        let mut levels = vec![err.to_string()];
        let mut cause = err.source();
        while let Some(next) = cause {
            levels.push(next.to_string());
            cause = next.source();
        }
        levels
    }

    /// An error whose message already quotes its source's, as the client
    /// libraries' errors often do (the redis crate's for a refused
    /// connection: its text is the `io::Error`'s, and so is its source).
    #[derive(Debug)]
    struct Quoting(std::io::Error);

    impl std::fmt::Display for Quoting {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}", self.0)
        }
    }

    impl std::error::Error for Quoting {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    // A cause that a level above already quotes is not printed again:
    // "Connection refused (os error 111): Connection refused (os error
    // 111)" said one thing twice, by `chain` and by `anyhow` alike.
    #[test]
    fn a_cause_quoted_by_the_level_above_is_said_once() {
        let refused = std::io::Error::from_raw_os_error(111);
        let said = refused.to_string();
        let err = Error::store("connect", "127.0.0.1:6379", Quoting(refused));
        let chain = err.chain().to_string();
        assert_eq!(chain.matches(&said).count(), 1, "repeated: {chain}");
        // The typed cause stays the source, for callers that look into it.
        assert!(
            std::error::Error::source(&err)
                .is_some_and(|cause| cause.downcast_ref::<Quoting>().is_some()),
            "{err:?}"
        );
        #[cfg(feature = "redis")]
        {
            let refused = std::io::Error::from_raw_os_error(111);
            let err = Error::store("connect", "127.0.0.1:1", ::redis::RedisError::from(refused));
            let chain = err.chain().to_string();
            assert_eq!(chain.matches(&said).count(), 1, "repeated: {chain}");
        }
        // A cause that says something new is still said.
        let err = Error::store("connect", "k", Quoting(std::io::Error::other("x")));
        assert_eq!(levels(&err).len(), 3);
        assert!(err.chain().to_string().ends_with(": x"), "{}", err.chain());
    }

    // What `anyhow` prints: every level of the chain. The cause must appear
    // once, not once per level that repeats it.
    #[test]
    fn an_error_chain_says_each_cause_once() {
        let refused =
            std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
        let err = Error::store("connect", "127.0.0.1:6379", refused);
        let mut levels = vec![err.to_string()];
        let mut cause = std::error::Error::source(&err);
        while let Some(next) = cause {
            levels.push(next.to_string());
            cause = next.source();
        }
        let printed = levels.join("\nCaused by: ");
        assert_eq!(
            printed.matches("Connection refused").count(),
            1,
            "repeated: {printed}"
        );
        let io: std::io::Error = err.into();
        assert_eq!(io.kind(), std::io::ErrorKind::Other);
    }
}
