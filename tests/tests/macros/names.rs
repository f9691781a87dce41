//! `#[locked]` lock names: the default name, and templates that give one
//! lock per argument value.
//!
//! Each test holds the exact name it expects from outside, then calls the
//! function: `Ok(None)` proves the function used exactly that name, and a
//! call with another argument running proves the locks are distinct.

use std::time::Duration;

use lock_core::{LockGuard, LockManager, locked, registry};

const TTL: Duration = Duration::from_secs(60);

async fn hold(locks: &LockManager, name: &str) -> LockGuard {
    locks
        .lock(name, TTL)
        .acquire()
        .await
        .expect("the memory store does not fail")
        .expect("nobody holds it yet")
}

#[locked(ttl = "1m")]
async fn default_named() -> u8 {
    7
}

// Without `name`, the lock is the function's path: two functions never
// share a lock by accident, and the name is predictable for operators.
#[tokio::test]
async fn without_a_name_the_lock_is_named_after_the_module_path_and_function() {
    let locks = LockManager::memory();
    registry::with_manager(locks.clone(), async {
        let expected = concat!(module_path!(), "::default_named");
        let held = hold(&locks, expected).await;
        assert_eq!(
            default_named().await.expect("memory store"),
            None,
            "holding {expected:?} must block the call"
        );
        held.release().await.expect("memory store");
        assert_eq!(
            default_named().await.expect("memory store"),
            Some(7),
            "free again"
        );
    })
    .await;
}

#[locked(name = "tenant:{tenant}", ttl = "1m")]
async fn per_tenant(tenant: &str) -> String {
    format!("report for {tenant}")
}

// The point of templates: one tenant's running job must not block another's.
#[tokio::test]
async fn an_argument_placeholder_gives_each_argument_value_its_own_lock() {
    let locks = LockManager::memory();
    registry::with_manager(locks.clone(), async {
        let _acme = hold(&locks, "tenant:acme").await;
        assert_eq!(
            per_tenant("acme").await.expect("memory store"),
            None,
            "acme's lock is held"
        );
        assert_eq!(
            per_tenant("globex").await.expect("memory store").as_deref(),
            Some("report for globex"),
            "globex has its own lock"
        );
    })
    .await;
}

struct Job {
    id: u32,
    kind: &'static str,
}

#[locked(name = "job:{job.kind}:{job.id}", ttl = "1m")]
async fn per_job(job: &Job) -> u32 {
    job.id
}

// Field placeholders let a lock follow a struct argument's identity.
#[tokio::test]
async fn a_field_placeholder_reads_the_field_of_the_argument() {
    let locks = LockManager::memory();
    registry::with_manager(locks.clone(), async {
        let _held = hold(&locks, "job:export:1").await;
        let first = Job {
            id: 1,
            kind: "export",
        };
        let second = Job {
            id: 2,
            kind: "export",
        };
        assert_eq!(
            per_job(&first).await.expect("memory store"),
            None,
            "job 1 is held"
        );
        assert_eq!(
            per_job(&second).await.expect("memory store"),
            Some(2),
            "job 2 has its own lock"
        );
    })
    .await;
}

struct Shard {
    index: u8,
}

impl Shard {
    #[locked(name = "shard:{self.index}", ttl = "1m")]
    async fn sweep(&self) -> u8 {
        self.index
    }
}

// `{self.field}` gives each instance its own lock, the common case for
// per-shard or per-connection work.
#[tokio::test]
async fn a_self_placeholder_gives_each_instance_its_own_lock() {
    let locks = LockManager::memory();
    registry::with_manager(locks.clone(), async {
        let _held = hold(&locks, "shard:3").await;
        assert_eq!(
            Shard { index: 3 }.sweep().await.expect("memory store"),
            None,
            "shard 3 is held"
        );
        assert_eq!(
            Shard { index: 4 }.sweep().await.expect("memory store"),
            Some(4),
            "shard 4 has its own lock"
        );
    })
    .await;
}

#[locked(name = "{{braces}}:{id}", ttl = "1m")]
async fn escaped(id: u32) -> u32 {
    id
}

#[locked(name = "fixed:{{literal}}", ttl = "1m")]
async fn escaped_literal() -> u8 {
    1
}

// `{{` and `}}` must produce literal braces, with and without placeholders,
// so names can contain braces at all.
#[tokio::test]
async fn doubled_braces_are_literal_braces_in_the_lock_name() {
    let locks = LockManager::memory();
    registry::with_manager(locks.clone(), async {
        let _held = hold(&locks, "{braces}:5").await;
        assert_eq!(
            escaped(5).await.expect("memory store"),
            None,
            "the name is \"{{braces}}:5\""
        );
        assert_eq!(
            escaped(6).await.expect("memory store"),
            Some(6),
            "another id, another lock"
        );
        let _fixed = hold(&locks, "fixed:{literal}").await;
        assert_eq!(
            escaped_literal().await.expect("memory store"),
            None,
            "the name is \"fixed:{{literal}}\""
        );
    })
    .await;
}
