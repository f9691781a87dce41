//! Every function shape `#[locked]` supports: it must compile, pass clippy
//! with `-D warnings`, and run, on edition 2021 and 2024.

use std::fmt::Display;
use std::sync::Arc;

use lock_core::{Error, LockManager, locked, registry};

/// A documented free function: the docs stay on the function.
#[locked(ttl = "1m")]
pub async fn free() -> u32 {
    1
}

#[locked(name = "visibility", ttl = "1m")]
pub(crate) async fn crate_visible() -> u32 {
    2
}

#[locked(ttl = "1m")]
#[must_use = "the count is the point of calling this"]
async fn with_must_use() -> u32 {
    3
}

#[cfg(any())]
#[locked(ttl = "1m")]
async fn removed_before_expansion() -> u32 {
    this_function_does_not_exist()
}

#[locked(ttl = "1m")]
#[cfg(any())]
async fn removed_after_expansion() -> u32 {
    this_function_does_not_exist()
}

#[locked(ttl = "1m")]
#[cfg(unix)]
async fn kept_by_cfg() -> u32 {
    4
}

#[locked(ttl = "1m")]
#[cfg(not(unix))]
async fn kept_by_cfg() -> u32 {
    4
}

struct Counter {
    name: String,
    count: u32,
}

impl Counter {
    #[locked(name = "counter:{name}", ttl = "1m")]
    async fn new(name: &str) -> Self {
        Counter {
            name: name.to_owned(),
            count: 0,
        }
    }

    #[locked(name = "counter:{self.name}", ttl = "1m")]
    async fn get(&self) -> u32 {
        self.count
    }

    #[locked(name = "counter:{self.name}", ttl = "1m")]
    async fn bump(&mut self) -> u32 {
        self.count += 1;
        self.count
    }

    #[locked(name = "counter:{self.name}", ttl = "1m")]
    async fn into_count(self) -> u32 {
        self.count
    }

    #[locked(name = "counter:{self.name}", ttl = "1h 30m", wait = "250ms")]
    async fn shared(self: Arc<Self>) -> u32 {
        self.count
    }
}

struct Labelled<T>(T);

impl<T: Display + Sync> Labelled<T> {
    #[locked(name = "labelled:{self.0}", ttl = "1m")]
    async fn label(&self) -> String {
        self.0.to_string()
    }
}

#[locked(name = "largest:{label}", ttl = "1m")]
async fn largest<T, L>(items: &[T], label: L) -> Option<T>
where
    T: Ord + Clone + Sync,
    L: Display + Send,
{
    items.iter().max().cloned()
}

#[locked(ttl = "1m")]
async fn first_word<'a>(text: &'a str) -> &'a str {
    text.split(' ').next().unwrap_or(text)
}

#[locked(ttl = "1m")]
async fn trimmed(text: &str) -> &str {
    text.trim()
}

#[locked(name = "show:{value}", ttl = "1m")]
async fn show(value: impl Display + Send) -> impl Display {
    format!("<{value}>")
}

#[locked(ttl = "1m")]
async fn shown_or_failed(value: u32) -> Result<impl Display, Error> {
    Ok(value)
}

struct Point {
    x: u32,
    y: u32,
}

#[locked(name = "sum:{a}:{b}:{x}", ttl = "1m")]
async fn patterns(mut total: u32, (a, b): (u32, u32), Point { x, y }: Point) -> u32 {
    total += a + b + x + y;
    total
}

fn non_negative(n: i64) -> Result<i64, Error> {
    if n >= 0 {
        Ok(n)
    } else {
        Err(Error::AlreadyInstalled)
    }
}

#[locked(ttl = "1m")]
async fn early(n: i64) -> Result<i64, Error> {
    if n == 0 {
        return Ok(100);
    }
    let n = non_negative(n)?;
    Ok(n * 2)
}

#[locked(ttl = "1m", renew, max_hold = "1h", on_lost = "cancel")]
async fn renewed() -> u32 {
    5
}

#[locked(name = "claim:{slot}", ttl = "1m", at_least = "30s", fenced)]
async fn claimed(slot: u64) -> Option<u64> {
    lock_core::current().and_then(|lease| lease.fence())
}

#[locked(ttl = "1m", shared, on_lost = "continue", contended = "none")]
async fn fleet_wide() -> Result<u32, Error> {
    Ok(6)
}

#[locked(ttl = "1m", contended = "error")]
async fn must_run(n: i64) -> Result<i64, Error> {
    if n == 0 {
        return Ok(100);
    }
    Ok(non_negative(n)? * 2)
}

#[locked(
    name = "catalog:{id}",
    ttl = "30s",
    wait = "1s",
    read,
    renew,
    at_least = "1s"
)]
async fn read_catalog(id: u64) -> Result<String, Error> {
    Ok(format!("catalog {id}"))
}

type AppResult<T> = Result<T, Error>;

#[locked(ttl = "1m", contended = "error", renew)]
async fn must_run_alias() -> AppResult<impl Display> {
    Ok(7)
}

#[locked(ttl = "1m")]
async fn alias_with_impl_trait() -> AppResult<impl Display> {
    Ok(8)
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(registry::with_manager(LockManager::memory(), run()));
}

async fn run() {
    assert_eq!(free().await.expect("memory"), Some(1), "free fn");
    assert_eq!(
        crate_visible().await.expect("memory"),
        Some(2),
        "pub(crate)"
    );
    assert_eq!(with_must_use().await.expect("memory"), Some(3), "must_use");
    assert_eq!(kept_by_cfg().await.expect("memory"), Some(4), "cfg kept");

    let mut counter = Counter::new("a").await.expect("memory").expect("free");
    assert_eq!(counter.get().await.expect("memory"), Some(0), "&self");
    assert_eq!(counter.bump().await.expect("memory"), Some(1), "&mut self");
    let shared = Arc::new(Counter::new("b").await.expect("memory").expect("free"));
    assert_eq!(shared.shared().await.expect("memory"), Some(0), "Arc<Self>");
    assert_eq!(counter.into_count().await.expect("memory"), Some(1), "self");
    assert_eq!(
        Labelled(7).label().await.expect("memory").as_deref(),
        Some("7"),
        "generic impl"
    );

    assert_eq!(
        largest(&[3, 9, 4], "numbers").await.expect("memory"),
        Some(Some(9)),
        "generics and where clause"
    );
    assert_eq!(
        first_word("hello world").await.expect("memory"),
        Some("hello"),
        "named lifetime"
    );
    assert_eq!(
        trimmed(" x ").await.expect("memory"),
        Some("x"),
        "elided lifetime"
    );
    let shown = show(5).await.expect("memory").expect("free");
    assert_eq!(shown.to_string(), "<5>", "impl Trait argument and return");
    let shown = shown_or_failed(6).await.expect("ok").expect("free");
    assert_eq!(shown.to_string(), "6", "impl Trait inside Result");
    assert_eq!(
        patterns(1, (2, 3), Point { x: 4, y: 5 })
            .await
            .expect("memory"),
        Some(15),
        "mut and pattern parameters"
    );
    assert_eq!(early(0).await.expect("ok"), Some(100), "early return");
    assert_eq!(early(4).await.expect("ok"), Some(8), "`?` passing");
    assert!(early(-1).await.is_err(), "`?` failing");

    assert_eq!(
        renewed().await.expect("memory"),
        Some(5),
        "renew, max_hold, on_lost"
    );
    let fence = claimed(1).await.expect("memory fences").expect("free");
    assert!(fence.is_some(), "fenced: the body sees its token");
    assert!(
        matches!(fleet_wide().await, Err(Error::NotShared { .. })),
        "shared refuses a memory manager"
    );
    let declared_shared = LockManager::memory().declared_shared();
    assert_eq!(
        registry::with_manager(declared_shared, fleet_wide())
            .await
            .expect("declared shared"),
        Some(6),
        "shared runs on a shared manager"
    );
    // `contended = "error"` keeps the declared return type.
    let value: Result<i64, Error> = must_run(4).await;
    assert_eq!(value.expect("free"), 8, "contended = error, `?` passing");
    assert_eq!(must_run(0).await.expect("free"), 100, "early return");
    assert!(must_run(-1).await.is_err(), "`?` failing");
    let shown = must_run_alias().await.expect("free");
    assert_eq!(shown.to_string(), "7", "alias and impl Trait");
    let shown = alias_with_impl_trait().await.expect("ok").expect("free");
    assert_eq!(
        shown.to_string(),
        "8",
        "alias with impl Trait, contended none"
    );

    // The futures are Send whenever their bodies are: they spawn on tokio.
    let manager = registry::manager();
    let spawned = tokio::spawn(registry::with_manager(manager.clone(), free()));
    assert_eq!(
        spawned.await.expect("no panic").expect("memory"),
        Some(1),
        "free fn future is Send"
    );
    let counter = Arc::new(Counter::new("c").await.expect("memory").expect("free"));
    let spawned = tokio::spawn(registry::with_manager(manager.clone(), counter.shared()));
    assert_eq!(
        spawned.await.expect("no panic").expect("memory"),
        Some(0),
        "method future is Send"
    );
    let spawned = tokio::spawn(registry::with_manager(
        manager,
        largest(&[1_u8, 2], "static slice"),
    ));
    assert_eq!(
        spawned.await.expect("no panic").expect("memory"),
        Some(Some(2)),
        "generic future is Send"
    );

    // A reader compiles with the options a reader may have, and its future
    // is Send; what a store does with a reader is the runtime's to test, so
    // the call is only built here. The catalogue records the mode, so
    // operators and `verify()` see which functions read.
    fn send<T: Send>(_: T) {}
    send(read_catalog(1));
    let reader = registry::declared()
        .into_iter()
        .find(|lock| lock.function().ends_with("::read_catalog"))
        .expect("read_catalog is declared");
    assert!(reader.options().read, "the catalogue records `read`");
    assert!(
        reader.options().renew && reader.options().at_least.is_some(),
        "and the options beside it"
    );
}
