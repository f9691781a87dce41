//! Injecting one fault of the schedule: on which worker (a holder, when
//! the fault is about holders), how, and its record on the server's clock.

use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::MutexGuard;
use tokio::time::Instant;

use super::explain::RIVAL;
use super::report::Injected;
use super::run::{Run, Slot, spawn_worker, wait_ready};
use super::schedule::Planned;
use super::worker::{late_name, lock_names};
use super::{FaultKind, LATE_BY, StoreKind, TTL};

/// How long a fault that is not required waits for its target (a worker,
/// or the store) to be free of the fault before it; past that it is left
/// out, so that slow faults do not pile up and stretch the run.
const PATIENCE: Duration = Duration::from_secs(2);

/// How long a pause or a partition lasts: past the TTL, so the lease runs
/// out under its holder.
pub const OUTAGE: Duration = Duration::from_secs(TTL.as_secs() + 2);

/// How far a server's clock jumps forward, and then back: past the TTL,
/// so every lease it keeps runs out at the jump.
const CLOCK_JUMP: Duration = Duration::from_secs(TTL.as_secs() + 2);

/// How long a worker asked to freeze before a write may take to reach
/// one: it makes fenced calls only until it does.
const FREEZE_GUARD: Duration = Duration::from_secs(60);

/// `lane`'s lock: waited for when `required`, else for [`PATIENCE`].
async fn take<T>(lane: &tokio::sync::Mutex<T>, required: bool) -> Option<MutexGuard<'_, T>> {
    if required {
        Some(lane.lock().await)
    } else {
        tokio::time::timeout(PATIENCE, lane.lock()).await.ok()
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

/// The slot for a fault on a holder: the first slot from `preferred` on
/// that `eligible` allows, whose worker holds a lock and has no fault
/// running, looked for over 2 s; else the first eligible slot from
/// `preferred` on, once it is free (see [`take`]).
async fn holder_slot(
    run: &Run,
    preferred: usize,
    required: bool,
    eligible: impl Fn(usize) -> bool,
) -> Option<MutexGuard<'_, Slot>> {
    let count = run.slots.len();
    let order: Vec<usize> = (0..count)
        .map(|offset| (preferred + offset) % count)
        .filter(|index| eligible(*index))
        .collect();
    let first = *order.first()?;
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let holding = holders(run).await;
        for index in &order {
            if let Ok(slot) = run.slots[*index].try_lock() {
                let its = |worker: &String| {
                    worker == &slot.label || worker.starts_with(&format!("{}.", slot.label))
                };
                if holding.iter().any(its) {
                    return Some(slot);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    take(&run.slots[first], required).await
}

/// Records the start of a fault on the server's clock, with the names it
/// can take leases of (`None`: every name); returns its id.
async fn fault_started(
    run: &Run,
    kind: FaultKind,
    target: &str,
    names: Option<&[String]>,
) -> Result<i64, String> {
    let query = format!(
        "INSERT INTO \"{}\".faults (kind, target, started, names)
         VALUES ($1, $2, clock_timestamp(), $3) RETURNING id",
        run.schema.0
    );
    let row = run
        .admin
        .query_one(&query, &[&kind.name(), &target, &names])
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

/// Injects one fault: `None` when it was left out, its target still busy
/// with an earlier one.
pub async fn inject(run: &Run, planned: Planned, choice: u64) -> Result<Option<Injected>, String> {
    let kind = planned.kind;
    if kind.store_wide() {
        return store_wide(run, planned, choice).await;
    }
    // The late fault needs a worker that waits long enough for a late
    // answer (the odd slots); the clock fault has its faked clock on slot
    // 0 alone.
    let slot = match kind {
        FaultKind::Clock => take(&run.slots[0], planned.required).await,
        FaultKind::Late => {
            holder_slot(run, planned.worker, planned.required, |index| {
                run.slots_wait_long(index)
            })
            .await
        }
        _ => holder_slot(run, planned.worker, planned.required, |_| true).await,
    };
    let Some(mut slot) = slot else {
        return Ok(None);
    };
    if kind == FaultKind::PauseWrite {
        return pause_write(run, &mut slot).await.map(Some);
    }
    let target = slot.label.clone();
    let id = fault_started(run, kind, &target, None).await?;
    run.log(&format!("{kind} of {target}"));
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
            tokio::time::sleep(Duration::from_millis(500)).await;
            slot.generation += 1;
            spawn_worker(&mut slot, &run.options, &run.schema)?;
            wait_ready(&mut slot).await?;
            run.log(&format!("{} replaces {target}", slot.label));
            // Ended once the new worker is ready: until then the slot
            // cannot make progress.
            format!("SIGKILL; {} took its place", slot.label)
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
            format!("every reply from the store held back {delay:?} in turn for 3 s")
        }
        FaultKind::Late => late(run, &slot).await?,
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
        FaultKind::PauseWrite
        | FaultKind::Restart
        | FaultKind::Failover
        | FaultKind::ServerClock => unreachable!("handled above"),
    };
    fault_ended(run, id, &detail).await?;
    Ok(Some(Injected {
        kind,
        target,
        detail,
    }))
}

/// A restart, a failover or a server clock jump.
async fn store_wide(run: &Run, planned: Planned, choice: u64) -> Result<Option<Injected>, String> {
    let kind = planned.kind;
    let Some(_lane) = take(&run.store_lane, planned.required).await else {
        return Ok(None);
    };
    let names = lock_names(run.options.names);
    let topology = Arc::clone(&run.topology);
    let touched = tokio::task::spawn_blocking(move || {
        let topology = topology.lock().unwrap_or_else(|e| e.into_inner());
        topology.touched_names(kind, choice, &names)
    })
    .await
    .map_err(|e| format!("the {kind} task failed: {e}"))??;
    let id = fault_started(run, kind, "store", touched.as_deref()).await?;
    run.log(&format!("{kind} of the store"));
    let topology = Arc::clone(&run.topology);
    let done = if kind == FaultKind::ServerClock {
        server_clock(run).await
    } else {
        tokio::task::spawn_blocking(move || {
            let mut topology = topology.lock().unwrap_or_else(|e| e.into_inner());
            match kind {
                FaultKind::Restart => topology.restart(choice),
                _ => topology.failover(choice),
            }
        })
        .await
        .map_err(|e| format!("the {kind} task failed: {e}"))?
    };
    let detail = done.unwrap_or_else(|e| format!("FAILED: {e}"));
    fault_ended(run, id, &detail).await?;
    run.log(&format!("{kind} done: {detail}"));
    if detail.starts_with("FAILED") {
        return Err(detail);
    }
    Ok(Some(Injected {
        kind,
        target: "store".to_owned(),
        detail,
    }))
}

/// The store's servers' wall clock jumped forward past the TTL, held
/// there 2 s, and jumped back; the fault lasts until the clock has caught
/// up with where it had been. Until then its effects go on: leases granted
/// or renewed while it was ahead end that much later, and fencing tokens
/// handed out then are above the clock, so a restart that forgot a name's
/// counter would start it below them (the clock floor of Redis's tokens
/// holds while the clock does not go back); no restart comes meanwhile.
async fn server_clock(run: &Run) -> Result<String, String> {
    let clock = run
        .clock
        .as_ref()
        .ok_or("the servers' clock cannot be moved")?;
    let ahead = i64::try_from(CLOCK_JUMP.as_millis()).unwrap_or(i64::MAX);
    let set = |offset: i64| {
        clock
            .set(offset)
            .map_err(|e| format!("moving the servers' clock: {e}"))
    };
    set(ahead)?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    set(0)?;
    tokio::time::sleep(CLOCK_JUMP).await;
    Ok(format!(
        "the servers' wall clock {CLOCK_JUMP:?} ahead for 2 s, then back (and {CLOCK_JUMP:?} for the real time to catch up)"
    ))
}

/// Asks the slot's worker to freeze before its next fenced write, waits
/// for it to do so, keeps it frozen past its TTL until another holder has
/// claimed the row it was about to write (at most 4 TTLs), then continues
/// it: its write, already on its way, arrives stale.
async fn pause_write(run: &Run, slot: &mut Slot) -> Result<Injected, String> {
    let worker = slot.label.clone();
    slot.input.say("pause-write")?;
    let lines = slot.lines.as_mut().ok_or("a worker without output")?;
    let line = tokio::time::timeout(FREEZE_GUARD, async {
        while let Some(line) = lines.recv().await {
            if line.starts_with("frozen ") {
                return Some(line);
            }
        }
        None
    })
    .await
    .map_err(|_| format!("{worker} did not reach a fenced write in {FREEZE_GUARD:?}"))?
    .ok_or_else(|| format!("{worker} ended before it froze"))?;
    let frozen_at = Instant::now();
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [_, id, target, name, fence] = fields[..] else {
        return Err(format!("{worker} said {line:?}"));
    };
    let id: i64 = id.parse().map_err(|_| format!("{worker} said {line:?}"))?;
    let fence: i64 = fence
        .parse()
        .map_err(|_| format!("{worker} said {line:?}"))?;
    let memory = run.options.store == StoreKind::Memory;
    run.log(&format!(
        "pause-write of {target} before its write of {name}"
    ));
    // Someone must want the name while its holder is frozen, and hold it
    // a while, with others waiting behind: the others are asked to take it
    // with long sections again and again (on the memory store, the other
    // tasks of the one process), until a TTL after the frozen holder is
    // continued. Whatever it then does (its write goes out stale; the
    // lease it lost is given back) must not touch the new holder.
    let insist = format!("insist fenced {name} long");
    let tell = |line: &str| {
        if memory {
            let _ = slot.input.say(line);
        } else {
            run.tell_others(slot.index, line);
        }
    };
    tell(&insist);
    let claimed = format!(
        "SELECT EXISTS (SELECT 1 FROM \"{s}\".intervals WHERE name = $1 AND mode = 'fenced'
                          AND worker <> $2 AND fence > $3 AND claim_version IS NOT NULL
                          AND started > (SELECT started FROM \"{s}\".faults WHERE id = $4))",
        s = run.schema.0
    );
    let mut overtaken = false;
    while frozen_at.elapsed() < TTL * 4 {
        if frozen_at.elapsed() > TTL + Duration::from_millis(500) {
            overtaken = run
                .admin
                .query_one(&claimed, &[&name, &target, &fence, &id])
                .await
                .is_ok_and(|row| row.get(0));
            if overtaken {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held = frozen_at.elapsed();
    slot.input.say("resume")?;
    let detail = format!(
        "frozen before its write of {name} (fence {fence}) for {:.1} s, {}",
        held.as_secs_f64(),
        if overtaken {
            "until another holder had claimed it"
        } else {
            "and nobody claimed it meanwhile"
        }
    );
    fault_ended(run, id, &detail).await?;
    tokio::time::sleep(TTL).await;
    tell(&format!("insist off fenced {name}"));
    Ok(Injected {
        kind: FaultKind::PauseWrite,
        target: target.to_owned(),
        detail,
    })
}

/// Every reply from the store to the slot's worker arrives [`LATE_BY`]
/// late, for two TTLs at least, its requests going through: an acquire it
/// sends is granted at once and answered after the lease has ended. The
/// worker is asked to take one plain lock again and again (a plain
/// acquire, the path with no watcher behind it), of a name no other worker
/// takes, so that it is granted at once; whenever the store shows that
/// lock granted to it, the harness itself takes the lock as soon as the
/// lease ends and holds it a while, recording its section as the
/// `rival`'s: the next holder the late answer must not run alongside. The
/// run fails if the worker runs its section on that answer.
async fn late(run: &Run, slot: &Slot) -> Result<String, String> {
    // A name nobody else takes: the worker's acquire is granted at once.
    let name = late_name(run.options.names);
    let lock_name = format!("plain:{name}");
    let owner = format!(
        ":{}",
        slot.child.as_ref().map(Child::id).ok_or("no worker")?
    );
    let look = run.look.as_ref().ok_or("no look at the store")?;
    let held_by_it = || async {
        look.lock(lock_name.as_str(), TTL)
            .holder()
            .await
            .ok()
            .flatten()
            .filter(|holder| holder.owner().ends_with(&owner))
            .map(|holder| holder.token().to_owned())
    };
    slot.input.say(&format!("insist plain {name}"))?;
    // First the worker's call in hand ends, and its calls on the name
    // begin, answered at once: seen as it holds the name.
    let started = Instant::now();
    let mut seen = None;
    while seen.is_none() && started.elapsed() < TTL * 5 {
        seen = held_by_it().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if seen.is_none() {
        let _ = slot.input.say(&format!("insist off plain {name}"));
        return Ok(format!(
            "the worker never took {lock_name} in {:?}: no reply held back",
            TTL * 5
        ));
    }
    // Then its answers come late: its next acquire of the name is granted
    // at once, and answered after its lease has ended. (Two TTLs at least;
    // once a grant is seen, until its answer has arrived; 5 TTLs at most.)
    for proxy in &slot.proxies {
        proxy.set_latency(LATE_BY);
    }
    let late_from = Instant::now();
    let mut answered_by = None;
    let mut rivals = tokio::task::JoinSet::new();
    let mut granted = 0;
    while late_from.elapsed() < TTL * 5
        && (late_from.elapsed() < TTL * 2 || answered_by.is_none_or(|by| Instant::now() < by))
    {
        if let Some(token) = held_by_it().await {
            if seen.as_ref() != Some(&token) {
                granted += 1;
                seen = Some(token);
                answered_by = Some(Instant::now() + LATE_BY + Duration::from_secs(1));
                rivals.spawn(rival(
                    look.clone(),
                    run.admin_statements(),
                    run.resource.clone(),
                    name.clone(),
                ));
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lasted = late_from.elapsed();
    for proxy in &slot.proxies {
        proxy.set_latency(Duration::ZERO);
    }
    let _ = slot.input.say(&format!("insist off plain {name}"));
    let mut held = 0;
    while let Some(done) = rivals.join_next().await {
        if let Ok(Ok(true)) = done {
            held += 1;
        }
    }
    Ok(format!(
        "every reply from the store arriving {LATE_BY:?} late for {:.1} s; {lock_name} granted to it {granted} times meanwhile, then held by the harness {held} times",
        lasted.as_secs_f64()
    ))
}

/// Takes plain lock `name` as soon as it is free (waiting up to 2 TTLs),
/// and holds it for a TTL, its section recorded as the `rival`'s on its
/// own connection to the resource; whether it held it. Its lease lasts two
/// TTLs: a section as long as its lease would overrun it, and the worker
/// insisting on the name would rightly take it as the lease ends.
async fn rival(
    look: lock_core::LockManager,
    statements: super::resource::Statements,
    resource: String,
    name: String,
) -> Result<bool, String> {
    let db = super::resource::connect(&resource, "chaos-rival").await?;
    let lock = look
        .lock(format!("plain:{name}").as_str(), TTL * 2)
        .wait_for(TTL * 2);
    let Some(guard) = lock.acquire().await.map_err(|e| e.to_string())? else {
        return Ok(false);
    };
    let id = (rand::random::<u64>() >> 1) as i64;
    let requested = i64::try_from(guard.held_for().as_micros()).unwrap_or(i64::MAX);
    let row = db
        .query_one(&statements.enter, &[&name, &RIVAL, &id, &requested])
        .await
        .map_err(|e| format!("the rival's section: {e}"))?;
    let value: i64 = row.get(1);
    tokio::time::sleep(TTL).await;
    db.execute(&statements.exit, &[&name, &(value + 1), &id])
        .await
        .map_err(|e| format!("the rival's section: {e}"))?;
    let _ = guard.release().await;
    Ok(true)
}
