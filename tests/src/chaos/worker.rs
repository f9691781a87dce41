//! One worker process (`chaos worker`): loops over the names, taking their
//! fenced and plain locks and changing the resource under them, until its
//! standard input closes (a clean stop) or it is killed.
//!
//! It prints `ready` once connected and, after a clean stop, `done` with
//! the number of leases its store still holds when the store lives in this
//! process (the memory store); the orchestrator counts them itself for the
//! others.

use std::io::Read;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lock_core::{LockManager, locked, registry};
use tokio_postgres::Client;

use super::resource::{self, Schema, Statements};
use super::schedule::Rng;
use super::topology;
use super::{StoreKind, TTL, WAIT};
use crate::harness::say;

/// What a worker is told, through its environment.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The store.
    pub kind: StoreKind,
    /// Its URL (see [`topology::connect`]).
    pub url: String,
    /// The resource's PostgreSQL URL.
    pub resource: String,
    /// The run's schema.
    pub schema: String,
    /// This worker's name in the records (`w3.1`: slot 3, second life).
    pub label: String,
    /// How many loops run in this process (the memory store's workers are
    /// tasks of one process; otherwise 1).
    pub tasks: usize,
    /// How many names the loops pick from.
    pub names: usize,
    /// The run's seed, mixed with the label for this worker's choices.
    pub seed: u64,
}

impl WorkerConfig {
    /// The environment that carries this configuration.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("CHAOS_STORE", self.kind.name().to_owned()),
            ("CHAOS_URL", self.url.clone()),
            ("CHAOS_RESOURCE", self.resource.clone()),
            ("CHAOS_SCHEMA", self.schema.clone()),
            ("CHAOS_LABEL", self.label.clone()),
            ("CHAOS_TASKS", self.tasks.to_string()),
            ("CHAOS_NAMES", self.names.to_string()),
            ("CHAOS_SEED", self.seed.to_string()),
        ]
    }

    /// The configuration in this process's environment.
    pub fn from_env() -> Result<WorkerConfig, String> {
        let var = |name: &str| {
            std::env::var(name).map_err(|_| format!("{name} is not set: run `chaos --store ...`"))
        };
        let number = |name: &str| -> Result<u64, String> {
            var(name)?
                .parse()
                .map_err(|e| format!("{name} is not a number: {e}"))
        };
        Ok(WorkerConfig {
            kind: StoreKind::parse(&var("CHAOS_STORE")?)?,
            url: var("CHAOS_URL")?,
            resource: var("CHAOS_RESOURCE")?,
            schema: var("CHAOS_SCHEMA")?,
            label: var("CHAOS_LABEL")?,
            tasks: number("CHAOS_TASKS")? as usize,
            names: number("CHAOS_NAMES")? as usize,
            seed: number("CHAOS_SEED")?,
        })
    }
}

/// Runs a worker to its end; the process's exit status.
pub fn main() -> i32 {
    let config = match WorkerConfig::from_env() {
        Ok(config) => config,
        Err(e) => {
            say(&format!("error {e}"));
            return 2;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            say(&format!("error a tokio runtime: {e}"));
            return 1;
        }
    };
    match runtime.block_on(work(config)) {
        Ok(line) => {
            say(&line);
            0
        }
        Err(e) => {
            say(&format!("error {e}"));
            1
        }
    }
}

/// Everything the loops share.
struct Shared {
    config: WorkerConfig,
    manager: LockManager,
    statements: Statements,
    stop: AtomicBool,
}

async fn work(config: WorkerConfig) -> Result<String, String> {
    let manager = topology::connect(config.kind, &config.url, &config.schema).await?;
    registry::install(manager.clone()).map_err(|e| format!("installing the manager: {e}"))?;
    let declared = registry::declared()
        .into_iter()
        .find(|lock| lock.name() == "fenced:{name}")
        .ok_or("the fenced section is not declared")?;
    if declared.ttl() != TTL || declared.wait() != WAIT {
        return Err(format!(
            "the fenced section declares ttl {:?} and wait {:?}; the harness expects {TTL:?} and {WAIT:?}",
            declared.ttl(),
            declared.wait()
        ));
    }
    let shared = Arc::new(Shared {
        statements: Schema(config.schema.clone()).statements(),
        manager,
        config,
        stop: AtomicBool::new(false),
    });
    let mut loops = tokio::task::JoinSet::new();
    for task in 0..shared.config.tasks {
        let db = resource::connect(&shared.config.resource, "chaos-worker").await?;
        loops.spawn(run_loop(Arc::clone(&shared), task, db));
    }
    say("ready");
    // A clean stop: the orchestrator closes our standard input.
    let stopping = Arc::clone(&shared);
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        stopping.stop.store(true, Ordering::SeqCst);
    });
    while let Some(ended) = loops.join_next().await {
        ended.map_err(|e| format!("a loop failed: {e}"))?;
    }
    let mut left = 0;
    if shared.config.kind == StoreKind::Memory {
        for name in lock_names(shared.config.names) {
            if shared
                .manager
                .lock(name.as_str(), TTL)
                .is_held()
                .await
                .map_err(|e| format!("checking {name}: {e}"))?
            {
                left += 1;
            }
        }
    }
    Ok(format!("done left={left}"))
}

/// Every lock name the workers take, without the prefix.
pub fn lock_names(names: usize) -> Vec<String> {
    (0..names)
        .flat_map(|i| [format!("fenced:n{i}"), format!("plain:n{i}")])
        .collect()
}

/// How one call ended, as the records say it.
#[derive(Debug)]
enum Outcome {
    /// Fenced: the write was accepted.
    Written,
    /// Fenced: a higher fence had touched the row since the read.
    Rejected,
    /// Fenced: the row had seen a higher fence before the read.
    Refused,
    /// Plain: done and released.
    Ran,
    /// Plain: done, but the release found the lease gone.
    Overran,
    /// The lock stayed taken for the whole wait.
    Busy,
    /// The lease was lost and the work dropped.
    Lost,
    /// The store or the resource failed.
    Error(String),
}

impl Outcome {
    fn name(&self) -> &'static str {
        match self {
            Outcome::Written => "written",
            Outcome::Rejected => "rejected",
            Outcome::Refused => "refused",
            Outcome::Ran => "ran",
            Outcome::Overran => "overran",
            Outcome::Busy => "busy",
            Outcome::Lost => "lost",
            Outcome::Error(_) => "error",
        }
    }
}

async fn run_loop(shared: Arc<Shared>, task: usize, mut db: Client) {
    let label = if shared.config.tasks > 1 {
        format!("{}{task}", shared.config.label)
    } else {
        shared.config.label.clone()
    };
    let mut rng = Rng::new(
        shared.config.seed
            ^ label.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
            }),
    );
    while !shared.stop.load(Ordering::SeqCst) {
        if db.is_closed() {
            match resource::connect(&shared.config.resource, "chaos-worker").await {
                Ok(fresh) => db = fresh,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            }
        }
        let name = format!("n{}", rng.below(shared.config.names as u64));
        let fenced = shared.config.kind.fences() && rng.below(2) == 0;
        let work = rng.between(Duration::from_millis(20), Duration::from_millis(80));
        let began = Instant::now();
        let interval = Mutex::new(None);
        let outcome = if fenced {
            fenced_call(&shared, &db, &label, &name, work, &interval).await
        } else {
            plain_call(&shared, &db, &label, &name, work, &interval).await
        };
        let detail = match &outcome {
            Outcome::Error(message) => Some(message.clone()),
            _ => None,
        };
        let waited = i64::try_from(began.elapsed().as_micros()).unwrap_or(i64::MAX);
        let interval = *interval.lock().unwrap_or_else(|e| e.into_inner());
        let mode = if fenced { "fenced" } else { "plain" };
        let _ = db
            .execute(
                &shared.statements.attempt,
                &[
                    &label,
                    &name,
                    &mode,
                    &waited,
                    &outcome.name(),
                    &interval,
                    &detail,
                ],
            )
            .await;
        if matches!(outcome, Outcome::Error(_)) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Why a fenced section ended without its write.
#[derive(Debug)]
enum SectionError {
    Lock(lock_core::Error),
    Resource(String),
}

impl From<lock_core::Error> for SectionError {
    fn from(e: lock_core::Error) -> Self {
        SectionError::Lock(e)
    }
}

/// What a fenced section shares with its caller.
struct Section<'a> {
    db: &'a Client,
    statements: &'a Statements,
    worker: &'a str,
    work: Duration,
    /// The interval it opened, for the caller to close if it is dropped.
    interval: &'a Mutex<Option<i64>>,
    /// When it was dropped unfinished.
    dropped: &'a Mutex<Option<Instant>>,
}

/// Notes the moment the section is dropped before it finished.
struct Unfinished<'a> {
    dropped: &'a Mutex<Option<Instant>>,
    finished: bool,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if !self.finished {
            *self.dropped.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        }
    }
}

/// The fenced read-modify-write: claim the row with this lease's fence,
/// work, write back unless a higher fence came by.
#[locked(
    name = "fenced:{name}",
    ttl = "3s",
    wait = "2s",
    fenced,
    renew,
    on_lost = "cancel"
)]
async fn fenced_section(name: &str, section: &Section<'_>) -> Result<Outcome, SectionError> {
    let mut unfinished = Unfinished {
        dropped: section.dropped,
        finished: false,
    };
    let fence = lock_core::current()
        .and_then(|lease| lease.fence())
        .ok_or_else(|| SectionError::Resource("a fenced lease without a fence".to_owned()))?;
    let fence = i64::try_from(fence)
        .map_err(|_| SectionError::Resource(format!("fence {fence} is beyond bigint")))?;
    let id = interval_id();
    *section.interval.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
    let row = section
        .db
        .query_one(
            &section.statements.claim,
            &[&name, &section.worker, &fence, &id],
        )
        .await
        .map_err(|e| SectionError::Resource(format!("claim: {e}")))?;
    let Some(value) = row.get::<_, Option<i64>>(1) else {
        let closed = section.db.execute(&section.statements.end, &[&id]).await;
        unfinished.finished = true;
        closed.map_err(|e| SectionError::Resource(format!("end: {e}")))?;
        return Ok(Outcome::Refused);
    };
    tokio::time::sleep(section.work).await;
    let row = section
        .db
        .query_one(
            &section.statements.write,
            &[&name, &fence, &(value + 1), &id],
        )
        .await
        .map_err(|e| SectionError::Resource(format!("write: {e}")))?;
    unfinished.finished = true;
    Ok(match row.get::<_, Option<i64>>(0) {
        Some(_) => Outcome::Written,
        None => Outcome::Rejected,
    })
}

async fn fenced_call(
    shared: &Shared,
    db: &Client,
    worker: &str,
    name: &str,
    work: Duration,
    interval: &Mutex<Option<i64>>,
) -> Outcome {
    let dropped = Mutex::new(None);
    let section = Section {
        db,
        statements: &shared.statements,
        worker,
        work,
        interval,
        dropped: &dropped,
    };
    let result = fenced_section(name, &section).await;
    let open = *interval.lock().unwrap_or_else(|e| e.into_inner());
    let dropped_at = *dropped.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(id) = open {
        // A section dropped (its lease lost) or failed may have left its
        // interval open: it ends when it stopped running, not when this is
        // written. (A closed one is left as it is.)
        let ago = dropped_at.map_or(0, |at| {
            i64::try_from(at.elapsed().as_micros()).unwrap_or(i64::MAX)
        });
        let _ = db.execute(&shared.statements.cancelled, &[&id, &ago]).await;
    }
    match result {
        Ok(Some(outcome)) => outcome,
        Ok(None) => Outcome::Busy,
        Err(SectionError::Lock(lock_core::Error::LeaseLost { .. })) => Outcome::Lost,
        Err(SectionError::Lock(e)) => Outcome::Error(describe(&e)),
        Err(SectionError::Resource(e)) => Outcome::Error(format!("resource: {e}")),
    }
}

async fn plain_call(
    shared: &Shared,
    db: &Client,
    worker: &str,
    name: &str,
    work: Duration,
    interval: &Mutex<Option<i64>>,
) -> Outcome {
    let lock = shared
        .manager
        .lock(format!("plain:{name}").as_str(), TTL)
        .wait_for(WAIT);
    let guard = match lock.acquire().await {
        Ok(Some(guard)) => guard,
        Ok(None) => return Outcome::Busy,
        Err(e) => return Outcome::Error(describe(&e)),
    };
    let section = async {
        let id = interval_id();
        *interval.lock().unwrap_or_else(|e| e.into_inner()) = Some(id);
        let row = db
            .query_one(&shared.statements.enter, &[&name, &worker, &id])
            .await
            .map_err(|e| format!("resource: enter: {e}"))?;
        let value: i64 = row.get(1);
        tokio::time::sleep(work).await;
        db.execute(&shared.statements.exit, &[&name, &(value + 1), &id])
            .await
            .map_err(|e| format!("resource: exit: {e}"))?;
        Ok::<(), String>(())
    }
    .await;
    let open = *interval.lock().unwrap_or_else(|e| e.into_inner());
    if let (Err(_), Some(id)) = (&section, open) {
        let _ = db
            .execute(&shared.statements.cancelled, &[&id, &0_i64])
            .await;
    }
    let released = guard.release().await;
    match (section, released) {
        (Err(e), _) => Outcome::Error(e),
        (Ok(()), Ok(true)) => Outcome::Ran,
        (Ok(()), Ok(false)) => Outcome::Overran,
        (Ok(()), Err(e)) => Outcome::Error(format!("release: {}", describe(&e))),
    }
}

/// A fresh interval id: random, positive, and known before the statement
/// that opens the interval is sent.
fn interval_id() -> i64 {
    (rand::random::<u64>() >> 1) as i64
}

/// An error with its causes, the lock's name left out, so the report can
/// count errors by cause.
fn describe(e: &lock_core::Error) -> String {
    let text = e.chain().to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(start) = rest.find("`chaos:") {
        out.push_str(&rest[..start]);
        out.push_str("`<lock>`");
        let after = &rest[start + 1..];
        rest = after.find('`').map_or("", |end| &after[end + 1..]);
    }
    out.push_str(rest);
    out.lines().next().unwrap_or_default().to_owned()
}
