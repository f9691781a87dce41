//! The orchestrator: starts the store and the workers, plays the schedule,
//! stops everything cleanly, and hands the records to the report.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use lock_core::LockManager;
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;
use tokio_postgres::Client;

use super::faults::inject;
use super::report::{Context, Injected, Report};
use super::resource::{self, Schema};
use super::schedule::{self, Planned, QUIET, Rng};
use super::topology::{self, LIBFAKETIME, Topology};
use super::worker::{WorkerConfig, lock_names, parse_done};
use super::{LONG_TIMEOUT, StoreKind, TTL, parse_duration};
use crate::netns::Netns;
use crate::proxy::Proxy;
use crate::server_clock::ServerClock;

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
pub struct Slot {
    /// Its place, from 0.
    pub index: usize,
    /// How many workers it had before this one (killed ones).
    pub generation: usize,
    /// This worker's name in the records: `w3#1`.
    pub label: String,
    /// The worker process.
    pub child: Option<Child>,
    /// Its standard input, where it is told what to do: shared with the
    /// run, so that a fault on one worker can ask others for something.
    pub input: Input,
    /// The lines it prints.
    pub lines: Option<mpsc::UnboundedReceiver<String>>,
    /// Its proxies to the store.
    pub proxies: Vec<Proxy>,
    /// The store's URL as its worker dials it.
    url: String,
    /// The resource's URL as its worker dials it.
    resource: String,
    /// Its network namespace, and the proxy there to the resource.
    netns: Option<(Netns, Proxy)>,
    /// The file that sets its wall clock (slot 0 only).
    pub faketime: Option<PathBuf>,
    /// The store's call timeout it uses, when not the default.
    pub timeout: Option<Duration>,
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
pub struct Run {
    /// The command line.
    pub options: Options,
    /// The run's records.
    pub schema: Schema,
    /// The resource's PostgreSQL URL.
    pub resource: String,
    /// The orchestrator's connection to it.
    pub admin: Client,
    /// The store's servers.
    pub topology: Arc<std::sync::Mutex<Topology>>,
    /// Each slot's lock is its lane: one fault at a time per worker.
    pub slots: Vec<Mutex<Slot>>,
    /// One store-wide fault at a time.
    pub store_lane: Mutex<()>,
    /// The servers' wall clock, when the run can move it.
    pub clock: Option<ServerClock>,
    /// Each slot's [`Input`], by index.
    pub inputs: Vec<Input>,
    /// The harness's own manager over the store, without proxies (none on
    /// the memory store, which lives in its worker).
    pub look: Option<LockManager>,
    started: Instant,
}

impl Run {
    /// Says `line` to every worker but the one in slot `except` and those
    /// under a fault of their own (whose calls that fault steers), as far
    /// as each can be told (one being replaced cannot).
    pub fn tell_others(&self, except: usize, line: &str) {
        for (index, input) in self.inputs.iter().enumerate() {
            if index != except && self.slots[index].try_lock().is_ok() {
                let _ = input.say(line);
            }
        }
    }

    /// The resource's statements, for sections the harness records itself.
    pub fn admin_statements(&self) -> super::resource::Statements {
        self.schema.statements()
    }

    /// Logs `line` with the time since the workload started.
    pub fn log(&self, line: &str) {
        log(self.started, line);
    }

    /// Whether the worker in slot `index` waits long for the store's
    /// answers ([`LONG_TIMEOUT`]).
    pub fn slots_wait_long(&self, index: usize) -> bool {
        slot_timeout(index).is_some()
    }
}

/// How many loops each worker process runs (on a networked store): two,
/// so that a process has several waiters of its own, and a wake-up one of
/// them receives must reach the other when it is not the one to use it.
const TASKS: usize = 2;

/// The call timeout of slot `index`: every other slot waits
/// [`LONG_TIMEOUT`], the others keep the stores' default.
fn slot_timeout(index: usize) -> Option<Duration> {
    (index % 2 == 1).then_some(LONG_TIMEOUT)
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
    // The servers' wall clock, where moving it means something.
    let clock = match Topology::server_clock_skipped(kind) {
        Some(_) => Err(None),
        None => tokio::task::spawn_blocking(ServerClock::new)
            .await
            .map_err(|e| format!("building the server clock: {e}"))?
            .map_err(|e| Some(format!("the servers' clock cannot be moved: {e}"))),
    };
    let env = clock.as_ref().map(ServerClock::env).unwrap_or_default();
    let resource_url = resource.clone();
    let topology = tokio::task::spawn_blocking(move || Topology::start(kind, &resource_url, &env))
        .await
        .map_err(|e| format!("starting the store: {e}"))??;
    let (supported, skipped) = topology.faults(clock.as_ref().err().and_then(Option::as_deref));
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
    // Every loop is a worker of the records: on the memory store the
    // tasks of its one process (`w.0`...), elsewhere the tasks of each
    // slot (`w3.1`: slot 3, task 1, whatever life).
    let workers_expected = if options.store == StoreKind::Memory {
        (0..options.workers).map(|t| format!("w.{t}")).collect()
    } else {
        (0..options.workers)
            .flat_map(|i| (0..TASKS).map(move |t| format!("w{i}.{t}")))
            .collect()
    };
    let mut inputs = Vec::with_capacity(slots.len());
    for slot in &slots {
        inputs.push(slot.lock().await.input.clone());
    }
    let look = if options.store == StoreKind::Memory {
        None
    } else {
        Some(topology::connect(options.store, &topology.direct_url(), &schema.0, None).await?)
    };
    let run = Arc::new(Run {
        inputs,
        look,
        topology: Arc::new(std::sync::Mutex::new(topology)),
        options: options.clone(),
        schema: schema.clone(),
        resource,
        admin,
        slots,
        store_lane: Mutex::new(()),
        clock: clock.ok(),
        started: Instant::now(),
    });
    let from = server_now(&run.admin).await?;
    let played = play(&run, &plan).await;
    let to = server_now(&run.admin).await?;
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
        workers_expected,
        working: (from, to),
        expects_activity: true,
    };
    Report::compute(&run.admin, &run.schema, context).await
}

/// The server's clock now, in seconds since the epoch: the clock of the
/// records.
async fn server_now(client: &Client) -> Result<f64, String> {
    client
        .query_one("SELECT extract(epoch FROM clock_timestamp())::float8", &[])
        .await
        .map(|row| row.get(0))
        .map_err(|e| format!("reading the server's clock: {e}"))
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
    // Each worker in a network namespace of its own when this machine
    // allows it: there, the harness's proxies listen on the very
    // addresses the servers announce, so every connection a worker makes
    // (to a cluster node it was redirected to, to the primary a sentinel
    // named) crosses its proxies.
    let namespaces = options.store != StoreKind::Memory && Netns::available();
    let ports = if namespaces {
        topology.ports()?
    } else {
        Vec::new()
    };
    let mut slots = Vec::with_capacity(processes);
    for index in 0..processes {
        let mut proxies = Vec::new();
        let (netns, url, resource) = if namespaces {
            let netns = Netns::create().map_err(|e| format!("a network namespace: {e}"))?;
            for port in &ports {
                let address = SocketAddr::from(([127, 0, 0, 1], *port));
                proxies.push(
                    Proxy::start_in(&netns, address, &address.to_string())
                        .await
                        .map_err(|e| format!("a proxy to {address} in {netns}: {e}"))?,
                );
            }
            // The resource's own way out, never faulted.
            let (inside, upstream) = resource_in_namespace(resource)?;
            let clean = Proxy::start_in(&netns, inside, &upstream)
                .await
                .map_err(|e| format!("a proxy to the resource in {netns}: {e}"))?;
            let url = topology.direct_url();
            let resource = resource_url_at(resource, inside)?;
            (Some((netns, clean)), url, resource)
        } else {
            for upstream in topology.upstreams() {
                proxies.push(
                    Proxy::start(&upstream)
                        .await
                        .map_err(|e| format!("a proxy to {upstream}: {e}"))?,
                );
            }
            let addresses: Vec<String> = proxies.iter().map(|p| p.addr().to_string()).collect();
            (None, topology.url(&addresses), resource.to_owned())
        };
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
            input: Input::default(),
            lines: None,
            proxies,
            url,
            resource,
            faketime,
            netns,
            timeout: if options.store == StoreKind::Memory {
                None
            } else {
                slot_timeout(index)
            },
        };
        spawn_worker(&mut slot, options, schema)?;
        slots.push(slot);
    }
    for slot in &mut slots {
        wait_ready(slot).await?;
    }
    Ok(slots.into_iter().map(Mutex::new).collect())
}

/// Starts the slot's worker (its next generation after a kill), in the
/// slot's network namespace if it has one.
pub fn spawn_worker(slot: &mut Slot, options: &Options, schema: &Schema) -> Result<(), String> {
    slot.label = if options.store == StoreKind::Memory {
        "w".to_owned()
    } else {
        format!("w{}#{}", slot.index, slot.generation)
    };
    let config = WorkerConfig {
        kind: options.store,
        url: slot.url.clone(),
        resource: slot.resource.clone(),
        schema: schema.0.clone(),
        label: slot.label.clone(),
        tasks: if options.store == StoreKind::Memory {
            options.workers
        } else {
            TASKS
        },
        names: options.names,
        seed: options.seed,
        timeout: slot.timeout,
    };
    let program = std::env::current_exe()
        .map_err(|e| format!("finding this program to start workers: {e}"))?;
    let mut command = match &slot.netns {
        Some((netns, _)) => netns.command(program),
        None => Command::new(program),
    };
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
    slot.input.replace(child.stdin.take());
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
pub async fn wait_ready(slot: &mut Slot) -> Result<(), String> {
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

/// Stops every worker cleanly, all at once (standard input closed: each
/// cuts the call in hand short, writes and releases as usual, and exits),
/// and counts the leases left in the store: as each worker ends, the
/// leases it held at or after the stop that still hold its token (read
/// at once, long before any of their TTLs could end them), then, once all
/// have ended, any name still held at all. A worker that does not stop
/// within 30 s is killed and counted.
async fn stop(run: &Run) -> Result<LeasesLeft, String> {
    let mut left = LeasesLeft::default();
    let manager = run.look.clone().map(Arc::new);
    let mut slots = Vec::with_capacity(run.slots.len());
    for slot in &run.slots {
        slots.push(slot.lock().await);
    }
    let stopping = Instant::now();
    for slot in &mut slots {
        slot.input.replace(None);
    }
    let mut ending = tokio::task::JoinSet::new();
    for slot in &mut slots {
        if slot.child.is_none() {
            continue;
        }
        let label = slot.label.clone();
        let mut lines = slot.lines.take().ok_or("a worker without output")?;
        // A worker whose output ended before it was told to stop died on
        // its own: how, if the system says.
        let died = match slot.child.as_mut().map(Child::try_wait) {
            Some(Ok(Some(status))) => format!("it had ended on its own ({status})"),
            _ => "its output ended with no report".to_owned(),
        };
        let manager = manager.clone();
        ending.spawn(async move {
            let last = tokio::time::timeout(Duration::from_secs(30), async {
                let mut last = None;
                while let Some(line) = lines.recv().await {
                    last = Some(line);
                }
                last
            })
            .await;
            let ended = stopping.elapsed();
            let report = match last {
                Ok(Some(line)) => parse_done(&line).ok_or(line),
                Ok(None) => Err(died),
                Err(_) => Err("did not stop within 30 s".to_owned()),
            };
            let (in_worker, held) = match report {
                Ok(done) => done,
                Err(line) => return Ended::Unclean(format!("{label}: {line}")),
            };
            let mut still = Vec::new();
            if let Some(manager) = &manager {
                for (name, token) in &held {
                    match holder(manager, name).await {
                        Ok(Some(holder)) if holder.token() == token => {
                            still.push(format!("{name} (held by {label})"));
                        }
                        Ok(_) => {}
                        Err(e) => still.push(format!("{name} (the store could not be read: {e})")),
                    }
                }
            }
            Ended::Clean {
                in_worker,
                reported: held.len(),
                still,
                ended,
            }
        });
    }
    while let Some(ended) = ending.join_next().await {
        match ended.map_err(|e| format!("a stop task failed: {e}"))? {
            Ended::Clean {
                in_worker,
                reported,
                still,
                ended,
            } => {
                left.in_workers += in_worker;
                left.reported += reported;
                left.names.extend(still);
                left.stopped_in = left.stopped_in.max(ended);
            }
            Ended::Unclean(why) => left.unclean.push(why),
        }
    }
    for slot in &mut slots {
        if let Some(mut child) = slot.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
    if let Some(manager) = &manager {
        for name in lock_names(run.options.names) {
            if left
                .names
                .iter()
                .any(|left| left.starts_with(&format!("{name} ")))
            {
                continue;
            }
            // A store the harness cannot read may be keeping anything:
            // counted as left, with why.
            match holder(manager, &name).await {
                Ok(None) => {}
                Ok(Some(_)) => left
                    .names
                    .push(format!("{name} (held once every worker had stopped)")),
                Err(e) => left
                    .names
                    .push(format!("{name} (the store could not be read: {e})")),
            }
        }
    }
    Ok(left)
}

/// Who holds `name`, asked up to three times: the harness's connection may
/// have been broken by a fault (a restarted server), and a client replaces
/// a broken connection on the call after the one that found it broken.
async fn holder(manager: &LockManager, name: &str) -> lock_core::Result<Option<lock_core::Holder>> {
    let mut tries = 0;
    loop {
        match manager.lock(name, TTL).holder().await {
            Err(_) if tries < 2 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            read => return read,
        }
    }
}

/// How one worker's stop went.
enum Ended {
    Clean {
        in_worker: usize,
        reported: usize,
        still: Vec<String>,
        ended: Duration,
    },
    Unclean(String),
}

/// What a clean shutdown left behind.
#[derive(Clone, Debug, Default)]
pub struct LeasesLeft {
    /// Names still held in a networked store, each with who held it.
    pub names: Vec<String>,
    /// Leases the memory store's worker still held at its end.
    pub in_workers: usize,
    /// Workers that did not end with `done`.
    pub unclean: Vec<String>,
    /// How many leases the workers said they held at or after the stop:
    /// the leases looked for.
    pub reported: usize,
    /// How long the last worker took to stop.
    pub stopped_in: Duration,
}

impl LeasesLeft {
    /// Every lease left.
    pub fn count(&self) -> usize {
        self.names.len() + self.in_workers
    }
}

/// Where a worker in a namespace reaches the resource (`127.0.0.2` and
/// the server's port: an address of the namespace's loopback that no
/// store proxy takes, even when the store is the same PostgreSQL), and the
/// server's address on the host.
fn resource_in_namespace(url: &str) -> Result<(SocketAddr, String), String> {
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| format!("the resource URL {url:?}: {e}"))?;
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => {
            return Err(format!(
                "the resource URL {url:?} names no TCP host; a worker in a network namespace needs one"
            ));
        }
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    Ok((
        SocketAddr::from(([127, 0, 0, 2], port)),
        format!("{host}:{port}"),
    ))
}

/// The resource's connection settings with the server at `at`, as
/// key=value pairs (every other setting of `url` kept).
fn resource_url_at(url: &str, at: SocketAddr) -> Result<String, String> {
    let config: tokio_postgres::Config = url
        .parse()
        .map_err(|e| format!("the resource URL {url:?}: {e}"))?;
    let quoted = |value: &str| format!("'{}'", value.replace('\\', "\\\\").replace('\'', "\\'"));
    let mut pairs = vec![format!("host={}", at.ip()), format!("port={}", at.port())];
    if let Some(user) = config.get_user() {
        pairs.push(format!("user={}", quoted(user)));
    }
    if let Some(password) = config.get_password() {
        pairs.push(format!(
            "password={}",
            quoted(&String::from_utf8_lossy(password))
        ));
    }
    if let Some(dbname) = config.get_dbname() {
        pairs.push(format!("dbname={}", quoted(dbname)));
    }
    Ok(pairs.join(" "))
}

/// A worker's standard input, shared between its slot and the run. Closing
/// it (a clean stop) is replacing it with `None`.
#[derive(Clone, Default)]
pub struct Input(Arc<std::sync::Mutex<Option<std::process::ChildStdin>>>);

impl Input {
    /// Sends `line` to the worker.
    pub fn say(&self, line: &str) -> Result<(), String> {
        use std::io::Write as _;
        let mut input = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let pipe = input.as_mut().ok_or("the worker's input is closed")?;
        pipe.write_all(format!("{line}\n").as_bytes())
            .and_then(|()| pipe.flush())
            .map_err(|e| format!("telling the worker {line:?}: {e}"))
    }

    fn replace(&self, pipe: Option<std::process::ChildStdin>) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = pipe;
    }
}
