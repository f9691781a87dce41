//! The orchestrator: starts the store and the workers, plays the schedule,
//! stops everything cleanly, and hands the records to the report.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;
use tokio_postgres::Client;

use super::report::{Context, Injected, Report};
use super::resource::{self, Schema};
use super::schedule::{self, Planned, QUIET, Rng};
use super::topology::{self, LIBFAKETIME, Topology};
use super::worker::{WorkerConfig, lock_names};
use super::{FaultKind, StoreKind, TTL, parse_duration};
use crate::proxy::Proxy;

/// What the command line asks for.
#[derive(Clone, Debug)]
pub struct Options {
    /// `--store`.
    pub store: StoreKind,
    /// `--duration` (default 60 s).
    pub duration: Duration,
    /// `--seed` (default: random, printed).
    pub seed: u64,
    /// `--json FILE`: the report, as JSON, written there too.
    pub json: Option<PathBuf>,
    /// `--workers` (default 6).
    pub workers: usize,
    /// `--names` (default 4).
    pub names: usize,
    /// `--keep`: leave the run's records in PostgreSQL for a closer look
    /// (until a later test process's cleanup drops the schema).
    pub keep: bool,
}

/// The command's usage.
pub const USAGE: &str = "usage: chaos --store <memory|redis|redis-cluster|redis-sentinel|memcached|postgres|etcd> \
[--duration 60s] [--seed N] [--json FILE] [--workers 6] [--names 4] [--keep]";

impl Options {
    /// Reads the command line (without the program name).
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut store = None;
        let mut options = Options {
            store: StoreKind::Memory,
            duration: Duration::from_secs(60),
            seed: rand::random::<u64>() % 1_000_000,
            json: None,
            workers: 6,
            names: 4,
            keep: false,
        };
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            let mut value = |what: &str| {
                args.next()
                    .cloned()
                    .ok_or_else(|| format!("{arg} needs {what}\n{USAGE}"))
            };
            let count = |text: String, what: &str| {
                text.parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("{what} must be a positive number, not {text:?}"))
            };
            match arg.as_str() {
                "--store" => store = Some(StoreKind::parse(&value("a store")?)?),
                "--duration" => options.duration = parse_duration(&value("a duration")?)?,
                "--seed" => {
                    let text = value("a number")?;
                    options.seed = text
                        .parse()
                        .map_err(|_| format!("--seed must be a number, not {text:?}"))?;
                }
                "--json" => options.json = Some(PathBuf::from(value("a file")?)),
                "--workers" => options.workers = count(value("a number")?, "--workers")?,
                "--names" => options.names = count(value("a number")?, "--names")?,
                "--keep" => options.keep = true,
                "-h" | "--help" => return Err(USAGE.to_owned()),
                other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
            }
        }
        options.store = store.ok_or_else(|| format!("--store is required\n{USAGE}"))?;
        Ok(options)
    }
}

/// One worker slot: the process in it now (a killed worker is replaced),
/// its proxies, and, for slot 0, the file that sets its wall clock.
struct Slot {
    index: usize,
    generation: usize,
    label: String,
    child: Option<Child>,
    lines: Option<mpsc::UnboundedReceiver<String>>,
    proxies: Vec<Proxy>,
    url: String,
    faketime: Option<PathBuf>,
}

impl Drop for Slot {
    /// On every way out, a clean stop included (where the worker is gone
    /// already): no worker left running, or left stopped by a pause, and no
    /// clock file left behind.
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = crate::server::signal(child.id(), "-CONT");
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(file) = &self.faketime {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// What every fault task shares.
struct Run {
    options: Options,
    schema: Schema,
    resource: String,
    admin: Client,
    topology: Arc<std::sync::Mutex<Topology>>,
    /// Each slot's lock is its lane: one fault at a time per worker.
    slots: Vec<Mutex<Slot>>,
    /// One store-wide fault at a time.
    store_lane: Mutex<()>,
    started: Instant,
}

/// Runs the harness; the process's exit status (1 when a figure that must
/// be 0 is not).
pub fn main(args: &[String]) -> i32 {
    let options = match Options::parse(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("{e}");
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
            eprintln!("chaos: a tokio runtime: {e}");
            return 2;
        }
    };
    match runtime.block_on(orchestrate(options.clone())) {
        Ok(report) => {
            print!("{}", report.text());
            if let Some(path) = &options.json {
                if let Err(e) = std::fs::write(path, report.json()) {
                    eprintln!("chaos: writing {}: {e}", path.display());
                    return 2;
                }
            }
            if report.violations().is_empty() { 0 } else { 1 }
        }
        Err(e) => {
            eprintln!("chaos: {e}");
            2
        }
    }
}

fn log(started: Instant, line: &str) {
    eprintln!("[chaos {:>6.1}s] {line}", started.elapsed().as_secs_f64());
}

async fn orchestrate(options: Options) -> Result<Report, String> {
    let resource = crate::postgres::postgres_url()
        .ok_or("PostgreSQL is needed for the shared resource: set POSTGRES_URL")?;
    let setup = Instant::now();
    log(
        setup,
        &format!(
            "store {}, {:?}, seed {}, {} workers, {} names",
            options.store, options.duration, options.seed, options.workers, options.names
        ),
    );
    let admin = resource::connect(&resource, "chaos-orchestrator").await?;
    let schema = Schema::fresh();
    schema.create(&admin, options.names).await?;
    // The records go on every way out, unless asked to stay.
    let report = run_in(&options, &schema, resource, setup).await;
    if options.keep {
        log(setup, &format!("records kept in schema {}", schema.0));
    } else if let Err(e) = schema.drop(&admin).await {
        log(setup, &format!("{e}; a later test process's cleanup will"));
    }
    report
}

/// The run itself, in `schema`.
async fn run_in(
    options: &Options,
    schema: &Schema,
    resource: String,
    setup: Instant,
) -> Result<Report, String> {
    let admin = resource::connect(&resource, "chaos-orchestrator").await?;
    let kind = options.store;
    let resource_url = resource.clone();
    let topology = tokio::task::spawn_blocking(move || Topology::start(kind, &resource_url))
        .await
        .map_err(|e| format!("starting the store: {e}"))??;
    let (supported, skipped) = topology.faults();
    let plan = schedule::plan(options.seed, options.duration, &supported, options.workers);
    log(
        setup,
        &format!(
            "store up; {} faults planned of {}; skipped: {}",
            plan.len(),
            supported
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", "),
            skipped
                .iter()
                .map(|(k, _)| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );
    let slots = start_slots(options, &topology, schema, &resource).await?;
    let run = Arc::new(Run {
        topology: Arc::new(std::sync::Mutex::new(topology)),
        options: options.clone(),
        schema: schema.clone(),
        resource,
        admin,
        slots,
        store_lane: Mutex::new(()),
        started: Instant::now(),
    });
    let played = play(&run, &plan).await;
    let leases_left = stop(&run).await?;
    let context = Context {
        store: options.store,
        seed: options.seed,
        duration: options.duration,
        workers: options.workers,
        names: options.names,
        ran_for: run.started.elapsed(),
        supported,
        skipped,
        injected: played.injected,
        fault_failures: played.failures,
        faults_left_out: played.left_out,
        leases_left,
    };
    Report::compute(&run.admin, &run.schema, context).await
}

/// Starts every slot's proxies and first worker, and waits until each
/// says it is ready.
async fn start_slots(
    options: &Options,
    topology: &Topology,
    schema: &Schema,
    resource: &str,
) -> Result<Vec<Mutex<Slot>>, String> {
    // The memory store's workers are tasks of one process.
    let processes = if options.store == StoreKind::Memory {
        1
    } else {
        options.workers
    };
    let mut slots = Vec::with_capacity(processes);
    for index in 0..processes {
        let mut proxies = Vec::new();
        for upstream in topology.upstreams() {
            proxies.push(
                Proxy::start(&upstream)
                    .await
                    .map_err(|e| format!("a proxy to {upstream}: {e}"))?,
            );
        }
        let addresses: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
        let faketime = if index == 0 && std::path::Path::new(LIBFAKETIME).exists() {
            let path = std::env::temp_dir().join(format!(
                "chaos-faketime-{}-{:08x}",
                std::process::id(),
                rand::random::<u32>()
            ));
            std::fs::write(&path, "+0\n").map_err(|e| format!("{}: {e}", path.display()))?;
            Some(path)
        } else {
            None
        };
        let mut slot = Slot {
            index,
            generation: 0,
            label: String::new(),
            child: None,
            lines: None,
            proxies,
            url: topology.url(&addresses),
            faketime,
        };
        spawn_worker(&mut slot, options, schema, resource)?;
        slots.push(slot);
    }
    for slot in &mut slots {
        wait_ready(slot).await?;
    }
    Ok(slots.into_iter().map(Mutex::new).collect())
}

fn spawn_worker(
    slot: &mut Slot,
    options: &Options,
    schema: &Schema,
    resource: &str,
) -> Result<(), String> {
    slot.label = if options.store == StoreKind::Memory {
        "w".to_owned()
    } else {
        format!("w{}#{}", slot.index, slot.generation)
    };
    let config = WorkerConfig {
        kind: options.store,
        url: slot.url.clone(),
        resource: resource.to_owned(),
        schema: schema.0.clone(),
        label: slot.label.clone(),
        tasks: if options.store == StoreKind::Memory {
            options.workers
        } else {
            1
        },
        names: options.names,
        seed: options.seed,
    };
    let program = std::env::current_exe()
        .map_err(|e| format!("finding this program to start workers: {e}"))?;
    let mut command = Command::new(program);
    command
        .arg("worker")
        .envs(config.to_env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(file) = &slot.faketime {
        command
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME_TIMESTAMP_FILE", file)
            .env("FAKETIME_NO_CACHE", "1")
            .env("DONT_FAKE_MONOTONIC", "1");
    }
    let mut child = command
        .spawn()
        .map_err(|e| format!("starting worker {}: {e}", slot.label))?;
    let stdout = child.stdout.take().ok_or("a worker without stdout")?;
    let (send, receive) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    slot.child = Some(child);
    slot.lines = Some(receive);
    Ok(())
}

/// Waits (up to 60 s: a worker started during a failover connects when it
/// is over) for the worker's `ready`.
async fn wait_ready(slot: &mut Slot) -> Result<(), String> {
    let label = slot.label.clone();
    let lines = slot.lines.as_mut().ok_or("a worker without output")?;
    match tokio::time::timeout(Duration::from_secs(60), lines.recv()).await {
        Ok(Some(line)) if line == "ready" => Ok(()),
        Ok(Some(line)) => Err(format!("worker {label}: {line}")),
        Ok(None) => Err(format!("worker {label} ended before it was ready")),
        Err(_) => Err(format!("worker {label} was not ready within 60 s")),
    }
}

/// What playing the schedule came to.
struct Played {
    injected: Vec<Injected>,
    /// Faults that failed, with why.
    failures: Vec<String>,
    /// Faults left out, their target busy with an earlier one.
    left_out: usize,
}

/// Plays the schedule.
async fn play(run: &Arc<Run>, plan: &[Planned]) -> Played {
    let mut tasks = tokio::task::JoinSet::new();
    let mut choices = Rng::new(run.options.seed ^ 0x5eed);
    for planned in plan {
        tokio::time::sleep_until(run.started + planned.at).await;
        let run = Arc::clone(run);
        let planned = planned.clone();
        let choice = choices.next_u64();
        tasks.spawn(async move {
            let kind = planned.kind;
            inject(&run, planned, choice)
                .await
                .map_err(|e| format!("{kind}: {e}"))
        });
    }
    let mut injected = Vec::new();
    let mut failures = Vec::new();
    let mut left_out = 0;
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(Some(fault))) => injected.push(fault),
            Ok(Ok(None)) => left_out += 1,
            Ok(Err(e)) => {
                log(run.started, &format!("FAULT FAILED {e}"));
                failures.push(e);
            }
            Err(e) => failures.push(format!("a fault task failed: {e}")),
        }
    }
    let quiet_from = Instant::now();
    tokio::time::sleep_until((run.started + run.options.duration).max(quiet_from + QUIET)).await;
    Played {
        injected,
        failures,
        left_out,
    }
}

/// The workers that hold a lock now (an interval open, started in the last
/// few seconds).
async fn holders(run: &Run) -> Vec<String> {
    let query = format!(
        "SELECT DISTINCT worker FROM \"{}\".intervals
         WHERE ended IS NULL AND started > clock_timestamp() - interval '5 seconds'",
        run.schema.0
    );
    match run.admin.query(&query, &[]).await {
        Ok(rows) => rows.iter().map(|row| row.get(0)).collect(),
        Err(_) => Vec::new(),
    }
}

/// How long a fault that is not required waits for its target (a worker,
/// or the store) to be free of the fault before it; past that it is left
/// out, so that slow faults do not pile up and stretch the run.
const PATIENCE: Duration = Duration::from_secs(2);

/// `lane`'s lock: waited for when `required`, else for [`PATIENCE`].
async fn take<'a, T>(lane: &'a Mutex<T>, required: bool) -> Option<tokio::sync::MutexGuard<'a, T>> {
    if required {
        Some(lane.lock().await)
    } else {
        tokio::time::timeout(PATIENCE, lane.lock()).await.ok()
    }
}

/// The slot for a fault on a holder: the first slot from `preferred` on
/// whose worker holds a lock and has no fault running, looked for over 2 s;
/// else `preferred`, once it is free (see [`take`]).
async fn holder_slot(
    run: &Run,
    preferred: usize,
    required: bool,
) -> Option<tokio::sync::MutexGuard<'_, Slot>> {
    let count = run.slots.len();
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let holding = holders(run).await;
        for offset in 0..count {
            let index = (preferred + offset) % count;
            if let Ok(slot) = run.slots[index].try_lock() {
                if holding.contains(&slot.label) {
                    return Some(slot);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    take(&run.slots[preferred % count], required).await
}

/// Records the start of a fault on the server's clock; returns its id.
async fn fault_started(run: &Run, kind: FaultKind, target: &str) -> Result<i64, String> {
    let query = format!(
        "INSERT INTO \"{}\".faults (kind, target, started) VALUES ($1, $2, clock_timestamp())
         RETURNING id",
        run.schema.0
    );
    let row = run
        .admin
        .query_one(&query, &[&kind.name(), &target])
        .await
        .map_err(|e| format!("recording a fault: {e}"))?;
    Ok(row.get(0))
}

async fn fault_ended(run: &Run, id: i64, detail: &str) -> Result<(), String> {
    let query = format!(
        "UPDATE \"{}\".faults SET ended = clock_timestamp(), detail = $2 WHERE id = $1",
        run.schema.0
    );
    run.admin
        .execute(&query, &[&id, &detail])
        .await
        .map(drop)
        .map_err(|e| format!("recording a fault's end: {e}"))
}

/// A worker stopped with `SIGSTOP`: continued on every way out, a task
/// cancelled mid-pause included.
struct Stopped(Option<u32>);

impl Stopped {
    fn stop(pid: u32) -> Result<Stopped, String> {
        crate::server::signal(pid, "-STOP").map_err(|e| e.to_string())?;
        Ok(Stopped(Some(pid)))
    }

    fn resume(mut self) -> Result<(), String> {
        match self.0.take() {
            Some(pid) => crate::server::signal(pid, "-CONT").map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if let Some(pid) = self.0.take() {
            let _ = crate::server::signal(pid, "-CONT");
        }
    }
}

/// How long a pause or a partition lasts: past the TTL, so the lease runs
/// out under its holder.
const OUTAGE: Duration = Duration::from_secs(TTL.as_secs() + 2);

/// Injects one fault: `None` when it was left out, its target still busy
/// with an earlier one.
async fn inject(run: &Run, planned: Planned, choice: u64) -> Result<Option<Injected>, String> {
    let kind = planned.kind;
    if kind.store_wide() {
        let Some(_lane) = take(&run.store_lane, planned.required).await else {
            return Ok(None);
        };
        let id = fault_started(run, kind, "store").await?;
        log(run.started, &format!("{kind} of the store"));
        let topology = Arc::clone(&run.topology);
        let done = tokio::task::spawn_blocking(move || {
            let mut topology = topology.lock().unwrap_or_else(|e| e.into_inner());
            match kind {
                FaultKind::Restart => topology.restart(choice),
                _ => topology.failover(choice),
            }
        })
        .await
        .map_err(|e| format!("the {kind} task failed: {e}"))?;
        let detail = done.unwrap_or_else(|e| format!("FAILED: {e}"));
        fault_ended(run, id, &detail).await?;
        log(run.started, &format!("{kind} done: {detail}"));
        if detail.starts_with("FAILED") {
            return Err(detail);
        }
        return Ok(Some(Injected {
            kind,
            target: "store".to_owned(),
            detail,
        }));
    }
    let slot = if kind == FaultKind::Clock {
        take(&run.slots[0], planned.required).await
    } else {
        holder_slot(run, planned.worker, planned.required).await
    };
    let Some(mut slot) = slot else {
        return Ok(None);
    };
    let target = slot.label.clone();
    let id = fault_started(run, kind, &target).await?;
    log(run.started, &format!("{kind} of {target}"));
    let detail = match kind {
        FaultKind::Pause => {
            let pid = slot.child.as_ref().map(Child::id).ok_or("no worker")?;
            let stopped = Stopped::stop(pid)?;
            tokio::time::sleep(OUTAGE).await;
            stopped.resume()?;
            format!("SIGSTOP for {OUTAGE:?}, then SIGCONT")
        }
        FaultKind::Kill => {
            let mut child = slot.child.take().ok_or("no worker")?;
            let _ = child.kill();
            let _ = child.wait();
            fault_ended(run, id, "SIGKILL").await?;
            tokio::time::sleep(Duration::from_millis(500)).await;
            slot.generation += 1;
            spawn_worker(&mut slot, &run.options, &run.schema, &run.resource)?;
            wait_ready(&mut slot).await?;
            log(run.started, &format!("{} replaces {target}", slot.label));
            return Ok(Some(Injected {
                kind,
                target,
                detail: format!("SIGKILL; {} took its place", slot.label),
            }));
        }
        FaultKind::Delay => {
            let delay = Duration::from_millis(300);
            for proxy in &slot.proxies {
                proxy.set_delay(delay);
            }
            tokio::time::sleep(Duration::from_secs(3)).await;
            for proxy in &slot.proxies {
                proxy.set_delay(Duration::ZERO);
            }
            format!("every reply from the store held back {delay:?} for 3 s")
        }
        FaultKind::Drop => {
            let until = Instant::now() + Duration::from_secs(3);
            let mut cuts = 0;
            while Instant::now() < until {
                for proxy in &slot.proxies {
                    proxy.cut_all();
                }
                cuts += 1;
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            format!("every connection to the store cut, {cuts} times over 3 s")
        }
        FaultKind::Partition => {
            for proxy in &slot.proxies {
                proxy.stall();
            }
            tokio::time::sleep(OUTAGE).await;
            for proxy in &slot.proxies {
                proxy.resume();
            }
            format!("traffic to the store held for {OUTAGE:?}")
        }
        FaultKind::Clock => {
            let file = slot.faketime.clone().ok_or("no faked clock")?;
            let set = |offset: &str| {
                std::fs::write(&file, format!("{offset}\n"))
                    .map_err(|e| format!("{}: {e}", file.display()))
            };
            set("+2h")?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            set("-2h")?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            set("+0")?;
            "wall clock 2 h ahead for 2 s, then 2 h behind for 2 s".to_owned()
        }
        FaultKind::Restart | FaultKind::Failover => unreachable!("store-wide faults return above"),
    };
    fault_ended(run, id, &detail).await?;
    Ok(Some(Injected {
        kind,
        target,
        detail,
    }))
}

/// Stops every worker cleanly (its standard input closed: it finishes the
/// call in hand, releases, and exits), then counts the leases left in the
/// store. A worker that does not stop within 30 s is killed and counted.
async fn stop(run: &Run) -> Result<LeasesLeft, String> {
    let mut left = LeasesLeft::default();
    for slot in &run.slots {
        let mut slot = slot.lock().await;
        let Some(mut child) = slot.child.take() else {
            continue;
        };
        drop(child.stdin.take());
        let lines = slot.lines.as_mut().ok_or("a worker without output")?;
        let last = tokio::time::timeout(Duration::from_secs(30), async {
            let mut last = None;
            while let Some(line) = lines.recv().await {
                last = Some(line);
            }
            last
        })
        .await;
        match last {
            Ok(Some(line)) if line.starts_with("done") => {
                if let Some(count) = line
                    .strip_prefix("done left=")
                    .and_then(|n| n.parse::<usize>().ok())
                {
                    left.in_workers += count;
                }
            }
            Ok(line) => left
                .unclean
                .push(format!("{}: {}", slot.label, line.unwrap_or_default())),
            Err(_) => {
                let _ = child.kill();
                left.unclean
                    .push(format!("{}: did not stop within 30 s", slot.label));
            }
        }
        let _ = child.wait();
    }
    if run.options.store != StoreKind::Memory {
        let url = run
            .topology
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .direct_url();
        let manager = topology::connect(run.options.store, &url, &run.schema.0).await?;
        for name in lock_names(run.options.names) {
            let lock = manager.lock(name.as_str(), TTL);
            if lock
                .is_held()
                .await
                .map_err(|e| format!("checking {name}: {e}"))?
            {
                left.names.push(name);
            }
        }
    }
    Ok(left)
}

/// What a clean shutdown left behind.
#[derive(Clone, Debug, Default)]
pub struct LeasesLeft {
    /// Names still held in a networked store.
    pub names: Vec<String>,
    /// Leases the memory store's worker still held at its end.
    pub in_workers: usize,
    /// Workers that did not end with `done`.
    pub unclean: Vec<String>,
}

impl LeasesLeft {
    /// Every lease left.
    pub fn count(&self) -> usize {
        self.names.len() + self.in_workers
    }
}
