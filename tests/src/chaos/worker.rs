//! One worker process (`chaos worker`): loops over the names, taking their
//! fenced and plain locks and changing the resource under them, until its
//! standard input closes (a clean stop) or it is killed.
//!
//! # The calls
//!
//! Each call picks a name, fenced or plain (half each, on a store that
//! fences), and short or long: two in three work 20 to 80 ms, one in three
//! works one to two TTLs and keeps its lease only by renewing it.
//!
//! | call | how the lock is taken | lease |
//! |---|---|---|
//! | fenced | `#[locked(..., fenced, renew, on_lost = "cancel")]` | renewed |
//! | plain, short | `acquire`, work, `release` | not renewed |
//! | plain, long | `Lock::renew().on_lost(Cancel).run(...)` | renewed |
//!
//! # Talking to the harness
//!
//! Lines on standard output: `ready` once connected; `frozen <fault id>
//! <target> <name> <fence>` when it froze itself before a write (below);
//! `done left=<n> held=<name>=<token>,...` after a clean stop: the leases
//! its store still holds when the store lives in this process (the memory
//! store), and every lease it held at or after the moment it was told to
//! stop, which the harness looks for in the store.
//!
//! Lines on standard input: `take <fenced|plain> <name> [long]` makes the
//! next call one on that lock (short, unless `long`); `insist <fenced|plain>
//! <name> [long]` makes every call one, until `insist off <fenced|plain>
//! <name>` (or another `insist`). `pause-write` asks for a freeze before the
//! next fenced write: the next call is fenced, and once its work is done,
//! with the lease's checks behind it, it records the fault, says `frozen`
//! and blocks its own task (its thread, with the lease's watcher) until
//! `resume`. When it is continued, the write goes out at once, in the same
//! poll: a holder that woke from a pause with its write already on the
//! way.
//! Closing standard input stops the worker: each call in hand cuts its
//! work short, writes and releases as usual, and no new call starts.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use lock_core::{LockManager, OnLost, locked, registry};
use tokio::sync::watch;
use tokio_postgres::Client;

use super::counted::{Counted, counting_attempts};
use super::resource::{self, Prepared, Schema, Statements};
use super::schedule::Rng;
use super::topology;
use super::{FaultKind, LONG_WAIT, LONG_WORK, PREFIX, SHORT_WORK, StoreKind, TTL, WAIT};
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
    /// This worker's name in the records (`w3#1`: slot 3, second life).
    pub label: String,
    /// How many loops run in this process (the memory store's workers are
    /// tasks of one process; otherwise 1).
    pub tasks: usize,
    /// How many names the loops pick from.
    pub names: usize,
    /// The run's seed, mixed with the label for this worker's choices.
    pub seed: u64,
    /// The store's call timeout, when not its default.
    pub timeout: Option<Duration>,
}

impl WorkerConfig {
    /// The environment that carries this configuration.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("CHAOS_STORE", self.kind.name().to_owned()),
            ("CHAOS_URL", self.url.clone()),
            ("CHAOS_RESOURCE", self.resource.clone()),
            ("CHAOS_SCHEMA", self.schema.clone()),
            ("CHAOS_LABEL", self.label.clone()),
            ("CHAOS_TASKS", self.tasks.to_string()),
            ("CHAOS_NAMES", self.names.to_string()),
            ("CHAOS_SEED", self.seed.to_string()),
        ];
        if let Some(timeout) = self.timeout {
            env.push(("CHAOS_TIMEOUT_MS", timeout.as_millis().to_string()));
        }
        env
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
            timeout: match std::env::var("CHAOS_TIMEOUT_MS") {
                Ok(_) => Some(Duration::from_millis(number("CHAOS_TIMEOUT_MS")?)),
                Err(_) => None,
            },
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
    counted: Counted,
    statements: Statements,
    /// Becomes true when the worker is told to stop.
    stop: watch::Receiver<bool>,
    /// A freeze before the next fenced write is asked for.
    freeze: AtomicBool,
    /// The lock the next call must take (`take fenced n2`).
    take: Mutex<Option<Asked>>,
    /// The lock every call takes until told otherwise (`insist plain n2`,
    /// `insist off plain n2`).
    insist: Mutex<Option<Asked>>,
    /// Where a frozen task of the memory store waits for `resume`.
    resume: Resume,
    /// The leases held now, and those held since the stop.
    held: Mutex<Held>,
    /// One connection to the resource for all the loops (queries from
    /// several are pipelined on it): the servers a run shares have only so
    /// many connections to give.
    db: tokio::sync::Mutex<Arc<Db>>,
}

/// A call the harness asked for: `fenced n2` or `plain n2`, short, or
/// long when followed by `long`.
#[derive(Clone, Debug)]
struct Asked {
    fenced: bool,
    name: String,
    long: bool,
}

impl Asked {
    fn new(mode: &str, name: &str, rest: &[&str]) -> Asked {
        Asked {
            fenced: mode == "fenced",
            name: name.to_owned(),
            long: rest == ["long"],
        }
    }
}

/// A one-shot gate a blocked thread waits at until the harness says
/// `resume`.
#[derive(Default)]
struct Resume {
    open: Mutex<bool>,
    opened: Condvar,
}

impl Resume {
    fn open(&self) {
        *self.open.lock().unwrap_or_else(PoisonError::into_inner) = true;
        self.opened.notify_all();
    }

    /// Blocks until opened (or `guard` has passed), then closes again.
    fn wait(&self, guard: Duration) {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let (mut open, _) = self
            .opened
            .wait_timeout_while(open, guard, |open| !*open)
            .unwrap_or_else(PoisonError::into_inner);
        *open = false;
    }
}

/// The leases this process holds, by token, and, from the stop on, every
/// one it held: what it reports for the harness to look for in the store.
#[derive(Default)]
struct Held {
    now: BTreeMap<String, String>,
    stopping: bool,
    since_stop: Vec<(String, String)>,
}

impl Held {
    fn took(&mut self, name: &str, token: &str) {
        self.now.insert(token.to_owned(), name.to_owned());
        if self.stopping {
            self.since_stop.push((name.to_owned(), token.to_owned()));
        }
    }

    fn gave_back(&mut self, token: &str) {
        self.now.remove(token);
    }

    fn stop(&mut self) {
        if !self.stopping {
            self.stopping = true;
            self.since_stop.extend(
                self.now
                    .iter()
                    .map(|(token, name)| (name.clone(), token.clone())),
            );
        }
    }
}

impl Shared {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The process's resource connection, made again if it broke.
    async fn db(&self) -> Result<Arc<Db>, String> {
        let mut db = self.db.lock().await;
        if db.client.is_closed() {
            *db = Arc::new(Db::connect(&self.config.resource, &self.statements).await?);
        }
        Ok(Arc::clone(&db))
    }
}

async fn work(config: WorkerConfig) -> Result<String, String> {
    let connected =
        topology::connect(config.kind, &config.url, &config.schema, config.timeout).await?;
    // The same store, its renewals counted.
    let counted = Counted::new(std::sync::Arc::clone(connected.store()));
    let manager = LockManager::new(counted.clone()).with_prefix(PREFIX);
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
    let (stop_tx, stop) = watch::channel(false);
    let statements = Schema(config.schema.clone()).statements();
    let db = Db::connect(&config.resource, &statements).await?;
    let shared = Arc::new(Shared {
        db: tokio::sync::Mutex::new(Arc::new(db)),
        statements,
        manager,
        counted,
        config,
        stop,
        freeze: AtomicBool::new(false),
        take: Mutex::new(None),
        insist: Mutex::new(None),
        resume: Resume::default(),
        held: Mutex::default(),
    });
    let mut loops = tokio::task::JoinSet::new();
    for task in 0..shared.config.tasks {
        loops.spawn(run_loop(Arc::clone(&shared), task));
    }
    say("ready");
    let commands = Arc::clone(&shared);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            let words: Vec<&str> = line.split_whitespace().collect();
            match words[..] {
                ["take", mode, name, ref rest @ ..] => {
                    *lock(&commands.take) = Some(Asked::new(mode, name, rest));
                }
                // Only the insistence it names: another fault may have
                // asked for another since.
                ["insist", "off", mode, name] => {
                    let mut insist = lock(&commands.insist);
                    if insist.as_ref().is_some_and(|asked| {
                        asked.fenced == (mode == "fenced") && asked.name == name
                    }) {
                        *insist = None;
                    }
                }
                ["insist", mode, name, ref rest @ ..] => {
                    *lock(&commands.insist) = Some(Asked::new(mode, name, rest));
                }
                ["pause-write"] => commands.freeze.store(true, Ordering::SeqCst),
                ["resume"] => commands.resume.open(),
                _ => {}
            }
        }
        // Closed: a clean stop. What is held now is reported, and so is
        // anything taken from here on.
        commands.held().stop();
        let _ = stop_tx.send(true);
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
    let held: Vec<String> = shared
        .held()
        .since_stop
        .iter()
        .map(|(name, token)| format!("{name}={token}"))
        .collect();
    Ok(format!("done left={left} held={}", held.join(",")))
}

/// Every lock name the workers take, without the prefix: those of the
/// `names` they pick from, and those of the name only the late fault has
/// one take ([`late_name`]).
pub fn lock_names(names: usize) -> Vec<String> {
    (0..=names)
        .flat_map(|i| [format!("fenced:n{i}"), format!("plain:n{i}")])
        .collect()
}

/// The name no worker picks by itself: the late fault has its worker take
/// it, so that the worker's acquire is granted at once (see
/// `faults::late`).
pub fn late_name(names: usize) -> String {
    format!("n{names}")
}

/// The `done` line's report: the memory store's leases left in the
/// worker, and the `(name, token)` pairs it held at or after its stop.
pub fn parse_done(line: &str) -> Option<(usize, Vec<(String, String)>)> {
    let rest = line.strip_prefix("done left=")?;
    let (left, held) = rest.split_once(" held=")?;
    let held = held
        .split(',')
        .filter(|pair| !pair.is_empty())
        .filter_map(|pair| {
            let (name, token) = pair.split_once('=')?;
            Some((name.to_owned(), token.to_owned()))
        })
        .collect();
    Some((left.parse().ok()?, held))
}

/// A resource connection and its prepared statements.
struct Db {
    client: Client,
    prepared: Prepared,
}

impl Db {
    async fn connect(resource: &str, statements: &Statements) -> Result<Db, String> {
        let client = resource::connect(resource, "chaos-worker").await?;
        let prepared = statements.prepare(&client).await?;
        Ok(Db { client, prepared })
    }
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

async fn run_loop(shared: Arc<Shared>, task: usize) {
    // Several loops in one process: each is a worker of its own in the
    // records, `w3#0.1` (the memory store's `w.1`).
    let label = if shared.config.tasks > 1 {
        format!("{}.{task}", shared.config.label)
    } else {
        shared.config.label.clone()
    };
    let mut rng = Rng::new(
        shared.config.seed
            ^ label.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
                (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
            }),
    );
    while !*shared.stop.borrow() {
        let Ok(db) = shared.db().await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        let mut name = format!("n{}", rng.below(shared.config.names as u64));
        let mut fenced = shared.config.kind.fences() && rng.below(2) == 0;
        let mut long = rng.below(3) == 0;
        // A lock asked for, once or until told otherwise: a short call on
        // it. A freeze asked for: a short fenced call, to reach a write
        // soon.
        let asked = lock(&shared.take)
            .take()
            .or_else(|| lock(&shared.insist).clone());
        if let Some(asked) = asked {
            fenced = asked.fenced && shared.config.kind.fences();
            (name, long) = (asked.name, asked.long);
        } else if shared.freeze.load(Ordering::SeqCst) && shared.config.kind.fences() {
            (fenced, long) = (true, false);
        }
        let (low, high) = if long { LONG_WORK } else { SHORT_WORK };
        // One plain call in three waits longer than a holder's TTL: a
        // wake-up it misses then shows as a lock left free while it
        // waits, instead of as a wait that ran out first.
        let wait = if rng.below(3) == 0 { LONG_WAIT } else { WAIT };
        let call = Call {
            shared: &shared,
            db: &db,
            label: &label,
            name: &name,
            work: rng.between(low, high),
            wait,
            interval: Mutex::new(None),
            token: Mutex::new(None),
            dropped: Mutex::new(None),
        };
        let began = Instant::now();
        let (outcome, attempts) = counting_attempts(async {
            match (fenced, long) {
                (true, _) => call.fenced().await,
                (false, false) => call.plain().await,
                (false, true) => call.plain_renewed().await,
            }
        })
        .await;
        let attempts = i32::try_from(attempts).unwrap_or(i32::MAX);
        let detail = match &outcome {
            Outcome::Error(message) => Some(message.clone()),
            _ => None,
        };
        let waited = i64::try_from(began.elapsed().as_micros()).unwrap_or(i64::MAX);
        let interval = *lock(&call.interval);
        let renewals = lock(&call.token)
            .take()
            .map_or(0, |token| shared.counted.take(&token));
        let renewals = i32::try_from(renewals).unwrap_or(i32::MAX);
        let mode = if fenced { "fenced" } else { "plain" };
        // The fenced function waits as its attribute says.
        let wait_us =
            i64::try_from(if fenced { WAIT } else { wait }.as_micros()).unwrap_or(i64::MAX);
        let _ = db
            .client
            .execute(
                &db.prepared.attempt,
                &[
                    &label,
                    &name,
                    &mode,
                    &waited,
                    &outcome.name(),
                    &interval,
                    &detail,
                    &renewals,
                    &attempts,
                    &wait_us,
                ],
            )
            .await;
        if matches!(outcome, Outcome::Error(_)) {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One call of a loop: what its section shares with it.
struct Call<'a> {
    shared: &'a Shared,
    db: &'a Db,
    /// The worker (or, on the memory store, the task) making it.
    label: &'a str,
    /// `n2`.
    name: &'a str,
    /// How long the section works.
    work: Duration,
    /// How long a plain call waits for its lock.
    wait: Duration,
    /// The interval its section opened, for the call to close if the
    /// section is dropped.
    interval: Mutex<Option<i64>>,
    /// The lease's owner token, once held.
    token: Mutex<Option<String>>,
    /// When the section was dropped unfinished.
    dropped: Mutex<Option<Instant>>,
}

/// Why a section ended without finishing.
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

/// Closes a section dropped before it finished, as it is dropped.
///
/// The lock's runtime drops a cancelled section's work before it gives
/// the lease back, so the next holder's section can begin only after the
/// drop. The section's end is written on the records' clock here, before
/// the drop returns, so that order shows in the records: written later,
/// from the moment of the drop less the time since, the end would carry
/// however long the write took to reach the database (milliseconds on a
/// loaded machine), and read as an overlap with a next holder that came
/// in just after. When the write cannot be made here (no multi-threaded
/// runtime, or it fails), the call closes the interval afterwards from
/// the moment noted.
struct Unfinished<'a> {
    call: &'a Call<'a>,
    finished: bool,
}

impl Drop for Unfinished<'_> {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        *lock(&self.call.dropped) = Some(Instant::now());
        let Some(id) = *lock(&self.call.interval) else {
            return;
        };
        // Unwinding: no blocking here (a second panic would abort); the call
        // closes the interval from the moment noted, if it gets the chance.
        if std::thread::panicking() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if runtime.runtime_flavor() != tokio::runtime::RuntimeFlavor::MultiThread {
            return;
        }
        let (client, prepared) = (&self.call.db.client, &self.call.db.prepared);
        tokio::task::block_in_place(|| {
            runtime.block_on(async {
                let now = 0_i64;
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&id, &now];
                let closing = client.execute(&prepared.cancelled, &params);
                let _ = tokio::time::timeout(Duration::from_secs(2), closing).await;
            });
        });
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
async fn fenced_section(name: &str, call: &Call<'_>) -> Result<Outcome, SectionError> {
    let mut unfinished = Unfinished {
        call,
        finished: false,
    };
    let lease = lock_core::current()
        .ok_or_else(|| SectionError::Resource("a section without its lease".to_owned()))?;
    call.holding(&format!("fenced:{name}"), lease.token());
    let fence = lease
        .fence()
        .ok_or_else(|| SectionError::Resource("a fenced lease without a fence".to_owned()))?;
    let fence = i64::try_from(fence)
        .map_err(|_| SectionError::Resource(format!("fence {fence} is beyond bigint")))?;
    let id = interval_id();
    *lock(&call.interval) = Some(id);
    let requested = call.requested_ago(lease.deadline());
    let (client, prepared) = (&call.db.client, &call.db.prepared);
    let row = client
        .query_one(
            &prepared.claim,
            &[&name, &call.label, &fence, &id, &requested],
        )
        .await
        .map_err(|e| SectionError::Resource(format!("claim: {e}")))?;
    let Some(value) = row.get::<_, Option<i64>>(1) else {
        let closed = client.execute(&prepared.end, &[&id]).await;
        unfinished.finished = true;
        closed.map_err(|e| SectionError::Resource(format!("end: {e}")))?;
        return Ok(Outcome::Refused);
    };
    call.work().await;
    if call.shared.freeze.swap(false, Ordering::SeqCst) {
        call.freeze(fence).await?;
    }
    // Prepared: the write leaves in this poll, frozen or not before it.
    let row = client
        .query_one(&prepared.write, &[&name, &fence, &(value + 1), &id])
        .await
        .map_err(|e| SectionError::Resource(format!("write: {e}")))?;
    unfinished.finished = true;
    Ok(match row.get::<_, Option<i64>>(0) {
        Some(_) => Outcome::Written,
        None => Outcome::Rejected,
    })
}

impl Call<'_> {
    /// Notes the lease this call holds under `name`.
    fn holding(&self, name: &str, token: &str) {
        *lock(&self.token) = Some(token.to_owned());
        self.shared.held().took(name, token);
    }

    /// Forgets the lease this call held, given back (or lost) now.
    fn gave_back(&self) {
        if let Some(token) = &*lock(&self.token) {
            self.shared.held().gave_back(token);
        }
    }

    /// The section's work: `self.work`, cut short when the worker is
    /// told to stop.
    async fn work(&self) {
        let mut stop = self.shared.stop.clone();
        tokio::select! {
            () = tokio::time::sleep(self.work) => {}
            _ = stop.wait_for(|stop| *stop) => {}
        }
    }

    /// Records a fault on this worker, says `frozen`, and blocks this
    /// task's thread until the harness says `resume`: the section, and the
    /// lease's watcher, which runs in the same task, stop mid-poll, as a
    /// thread stalled by a pause does, while the rest of the process runs
    /// on. (A whole process stopped by its own `SIGSTOP` can still send the
    /// write before the stop takes hold.)
    async fn freeze(&self, fence: i64) -> Result<(), SectionError> {
        let (client, prepared) = (&self.db.client, &self.db.prepared);
        let row = client
            .query_one(
                &prepared.fault,
                &[&FaultKind::PauseWrite.name(), &self.label],
            )
            .await
            .map_err(|e| SectionError::Resource(format!("recording the freeze: {e}")))?;
        let id: i64 = row.get(0);
        say(&format!("frozen {id} {} {} {fence}", self.label, self.name));
        // Far past any wait of the harness's: a lost `resume` must not hang
        // the run.
        tokio::task::block_in_place(|| self.shared.resume.wait(Duration::from_secs(120)));
        Ok(())
    }

    /// Closes the interval a section left open, as ended when it stopped
    /// running (a closed one is left as it is).
    async fn close_dropped_interval(&self) {
        let open = *lock(&self.interval);
        let dropped_at = *lock(&self.dropped);
        if let Some(id) = open {
            let ago = dropped_at.map_or(0, |at| {
                i64::try_from(at.elapsed().as_micros()).unwrap_or(i64::MAX)
            });
            let _ = self
                .db
                .client
                .execute(&self.db.prepared.cancelled, &[&id, &ago])
                .await;
        }
    }

    async fn fenced(&self) -> Outcome {
        let result = fenced_section(self.name, self).await;
        self.gave_back();
        self.close_dropped_interval().await;
        match result {
            Ok(Some(outcome)) => outcome,
            Ok(None) => Outcome::Busy,
            Err(SectionError::Lock(lock_core::Error::LeaseLost { .. })) => Outcome::Lost,
            Err(SectionError::Lock(e)) => Outcome::Error(describe(&e)),
            Err(SectionError::Resource(e)) => Outcome::Error(format!("resource: {e}")),
        }
    }

    /// How many microseconds ago the acquire that won a lease whose local
    /// deadline is `deadline` was sent, renewals not counted: the deadline
    /// is the TTL less the store's clock margin after it.
    fn requested_ago(&self, deadline: tokio::time::Instant) -> i64 {
        let store = self.shared.manager.store();
        let lasts = TTL.saturating_sub(store.clock_margin(TTL));
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        i64::try_from(lasts.saturating_sub(left).as_micros()).unwrap_or(i64::MAX)
    }

    /// The plain section: read the counter, work, write it back.
    /// `requested` is how many microseconds ago its lease's acquire was
    /// sent.
    async fn plain_section(&self, requested: i64) -> Result<(), String> {
        let mut unfinished = Unfinished {
            call: self,
            finished: false,
        };
        let (client, prepared) = (&self.db.client, &self.db.prepared);
        let id = interval_id();
        *lock(&self.interval) = Some(id);
        let row = client
            .query_one(&prepared.enter, &[&self.name, &self.label, &id, &requested])
            .await
            .map_err(|e| format!("resource: enter: {e}"))?;
        let value: i64 = row.get(1);
        self.work().await;
        let exited = client
            .execute(&prepared.exit, &[&self.name, &(value + 1), &id])
            .await;
        unfinished.finished = true;
        exited.map(drop).map_err(|e| format!("resource: exit: {e}"))
    }

    /// A short plain call: `acquire`, the section, `release`; no renewal.
    async fn plain(&self) -> Outcome {
        let lock = self
            .shared
            .manager
            .lock(format!("plain:{}", self.name).as_str(), TTL)
            .wait_for(self.wait);
        let guard = match lock.acquire().await {
            Ok(Some(guard)) => guard,
            Ok(None) => return Outcome::Busy,
            Err(e) => return Outcome::Error(describe(&e)),
        };
        self.holding(lock.name(), guard.token());
        let requested = i64::try_from(guard.held_for().as_micros()).unwrap_or(i64::MAX);
        let section = self.plain_section(requested).await;
        if section.is_err() {
            self.close_dropped_interval().await;
        }
        let released = guard.release().await;
        self.gave_back();
        match (section, released) {
            (Err(e), _) => Outcome::Error(e),
            (Ok(()), Ok(true)) => Outcome::Ran,
            (Ok(()), Ok(false)) => Outcome::Overran,
            (Ok(()), Err(e)) => Outcome::Error(format!("release: {}", describe(&e))),
        }
    }

    /// A long plain call: the section under `run`, renewed, dropped if the
    /// lease is lost.
    async fn plain_renewed(&self) -> Outcome {
        let lock = self
            .shared
            .manager
            .lock(format!("plain:{}", self.name).as_str(), TTL)
            .wait_for(self.wait)
            .renew()
            .on_lost(OnLost::Cancel);
        let name = lock.name().to_owned();
        let result = lock
            .run(async {
                let lease = lock_core::current().ok_or_else(|| {
                    SectionError::Resource("a section without its lease".to_owned())
                })?;
                self.holding(&name, lease.token());
                let requested = self.requested_ago(lease.deadline());
                self.plain_section(requested)
                    .await
                    .map_err(SectionError::Resource)
            })
            .await;
        self.gave_back();
        self.close_dropped_interval().await;
        match result {
            Ok(Some(())) => Outcome::Ran,
            Ok(None) => Outcome::Busy,
            Err(SectionError::Lock(lock_core::Error::LeaseLost { .. })) => Outcome::Lost,
            Err(SectionError::Lock(e)) => Outcome::Error(describe(&e)),
            Err(SectionError::Resource(e)) => Outcome::Error(e),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_done_line_reads_back() {
        assert_eq!(
            parse_done("done left=2 held=fenced:n0=abc,plain:n1=d=e"),
            Some((
                2,
                vec![
                    ("fenced:n0".to_owned(), "abc".to_owned()),
                    ("plain:n1".to_owned(), "d=e".to_owned())
                ]
            ))
        );
        assert_eq!(parse_done("done left=0 held="), Some((0, Vec::new())));
        assert_eq!(parse_done("error no store"), None);
    }
}
