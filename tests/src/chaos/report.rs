//! The report: every figure computed from the run's records, printed and
//! as JSON, and the figures that must be 0.
//!
//! | figure | must be | from |
//! |---|---|---|
//! | stale writes accepted | 0 | a fenced write accepted although another holder read the row between its read and its write (row versions, no clocks) |
//! | lost updates on the resource | 0 | accepted writes minus the row's value |
//! | fenced reads refused | 0 | a new holder whose fence was lower than one the row had already seen: the store's fences went back |
//! | leases left after the clean stop | 0 | the store, checked name by name once every worker has stopped |
//! | stuck names | 0 | a name still untaken `TTL` + slack after its holder was killed, paused or cut off |
//! | waiters that slept past a release | 0 | a call waiting when the lock was released, nobody served within [`WAKE_SLACK`] (a pause, partition or cut connections of either worker, and store-wide faults, excused; memcached has no cross-process wakeups) |
//! | unexplained overlaps | 0 | two plain critical sections of one name at once with no fault to explain it |
//! | fault kinds never injected | 0 | a kind the store suffers that the run did not manage to inject |

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use serde_json::json;
use tokio_postgres::Client;

use super::resource::Schema;
use super::run::LeasesLeft;
use super::{FaultKind, STUCK_SLACK, StoreKind, TTL, WAKE_SLACK};

/// A fault that was injected.
#[derive(Clone, Debug)]
pub struct Injected {
    /// Its kind.
    pub kind: FaultKind,
    /// The worker (`w3#0`) or `store`.
    pub target: String,
    /// What exactly was done.
    pub detail: String,
}

/// What the orchestrator knows besides the records.
#[derive(Clone, Debug)]
pub struct Context {
    /// The store.
    pub store: StoreKind,
    /// The seed.
    pub seed: u64,
    /// The asked length.
    pub duration: Duration,
    /// Workers.
    pub workers: usize,
    /// Names.
    pub names: usize,
    /// How long the workload ran, quiet end included.
    pub ran_for: Duration,
    /// Fault kinds the store suffers.
    pub supported: Vec<FaultKind>,
    /// Fault kinds it is spared, with why.
    pub skipped: Vec<(FaultKind, &'static str)>,
    /// Faults injected.
    pub injected: Vec<Injected>,
    /// Faults that could not be injected, with why.
    pub fault_failures: Vec<String>,
    /// Faults left out because their target was still under an earlier
    /// one.
    pub faults_left_out: usize,
    /// What the clean stop left.
    pub leases_left: LeasesLeft,
}

/// One overlap of two critical sections of a name.
#[derive(Clone, Debug)]
pub struct Overlap {
    /// The name and mode (`n2 plain`).
    pub lock: String,
    /// The earlier holder and the later one.
    pub holders: (String, String),
    /// How long both ran.
    pub length: Duration,
    /// The fault that explains it, or `None`.
    pub cause: Option<FaultKind>,
}

/// Every figure of a run.
#[derive(Clone, Debug)]
pub struct Report {
    context: Context,
    /// Per worker slot: calls done (the body ran), busy, lost, errors.
    per_worker: Vec<(String, [i64; 4])>,
    fenced_accepted: i64,
    fenced_rejected: i64,
    fenced_refused: i64,
    fenced_cancelled: i64,
    stale_accepted: i64,
    lost_updates: i64,
    plain_lost_updates: i64,
    plain_overlaps: Vec<Overlap>,
    fenced_overlaps: Vec<Overlap>,
    /// Per fault (kind, target): how long the names its target held stayed
    /// untaken, the longest; `None`: never taken before the run ended.
    unavailable: Vec<(FaultKind, String, Option<Duration>)>,
    slept_past_release: Vec<Slept>,
    errors: Vec<(String, i64)>,
}

impl Report {
    /// Computes the figures from the records in `schema`.
    pub async fn compute(
        client: &Client,
        schema: &Schema,
        context: Context,
    ) -> Result<Report, String> {
        let s = &schema.0;
        let q = |e: tokio_postgres::Error| format!("reading the records: {e}");
        client
            .batch_execute(&format!(
                "CREATE INDEX ON \"{s}\".intervals (name, mode, started);
                 CREATE INDEX ON \"{s}\".attempts (name, mode, wait_started);
                 ANALYZE \"{s}\".intervals; ANALYZE \"{s}\".attempts;"
            ))
            .await
            .map_err(q)?;
        let per_worker = client
            .query(
                &format!(
                    "SELECT split_part(worker, '#', 1),
                        count(*) FILTER (WHERE outcome IN ('written', 'rejected', 'refused', 'ran', 'overran')),
                        count(*) FILTER (WHERE outcome = 'busy'),
                        count(*) FILTER (WHERE outcome = 'lost'),
                        count(*) FILTER (WHERE outcome = 'error')
                     FROM \"{s}\".attempts GROUP BY 1 ORDER BY 1"
                ),
                &[],
            )
            .await
            .map_err(q)?
            .iter()
            .map(|row| {
                (
                    row.get::<_, String>(0),
                    [row.get(1), row.get(2), row.get(3), row.get(4)],
                )
            })
            .collect();
        let fenced = client
            .query_one(
                &format!(
                    "SELECT
                        count(*) FILTER (WHERE write_version IS NOT NULL),
                        count(*) FILTER (WHERE claim_version IS NOT NULL AND write_version IS NULL
                                         AND ended IS NOT NULL AND NOT cancelled),
                        count(*) FILTER (WHERE claim_version IS NULL AND EXISTS (
                            SELECT 1 FROM \"{s}\".attempts a
                            JOIN \"{s}\".intervals c ON c.name = i.name AND c.mode = 'fenced'
                              AND c.claim_version IS NOT NULL AND c.fence > i.fence
                              AND c.started < a.wait_started
                            WHERE a.interval_id = i.id)),
                        count(*) FILTER (WHERE cancelled)
                     FROM \"{s}\".intervals i WHERE mode = 'fenced'"
                ),
                &[],
            )
            .await
            .map_err(q)?;
        // A read refused counts as the fence going back only when the
        // holder that raised the row's fence past this one had claimed it
        // before this call even began to wait: a later grant with a lower
        // fence. (A holder frozen between its acquire and its read is
        // refused rightly by the holder that came after it.)
        //
        // A write is stale when another holder claimed the row between
        // this holder's claim and its write: that holder read a value this
        // write then overwrote.
        let stale_accepted: i64 = client
            .query_one(
                &format!(
                    "SELECT count(*) FROM \"{s}\".intervals a
                     WHERE a.mode = 'fenced' AND a.write_version IS NOT NULL AND EXISTS (
                        SELECT 1 FROM \"{s}\".intervals b
                        WHERE b.mode = 'fenced' AND b.name = a.name AND b.id <> a.id
                          AND b.claim_version > a.claim_version
                          AND b.claim_version < a.write_version)"
                ),
                &[],
            )
            .await
            .map_err(q)?
            .get(0);
        let lost = |table: &str| {
            format!("SELECT coalesce(sum(writes - value), 0)::bigint FROM \"{s}\".{table}")
        };
        let lost_updates: i64 = client
            .query_one(&lost("resource"), &[])
            .await
            .map_err(q)?
            .get(0);
        let plain_lost_updates: i64 = client
            .query_one(&lost("counter"), &[])
            .await
            .map_err(q)?
            .get(0);
        let faults = Faults::read(client, s).await?;
        let plain_overlaps = overlaps(client, s, (context.store, "plain"), &faults).await?;
        let fenced_overlaps = overlaps(client, s, (context.store, "fenced"), &faults).await?;
        let unavailable = unavailability(client, s, context.store, &faults).await?;
        let slept_past_release = slept_past_release(client, s, &faults).await?;
        let errors = client
            .query(
                &format!(
                    "SELECT coalesce(detail, ''), count(*) FROM \"{s}\".attempts
                     WHERE outcome = 'error' GROUP BY 1 ORDER BY 2 DESC LIMIT 8"
                ),
                &[],
            )
            .await
            .map_err(q)?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect();
        Ok(Report {
            context,
            per_worker,
            fenced_accepted: fenced.get(0),
            fenced_rejected: fenced.get(1),
            fenced_refused: fenced.get(2),
            fenced_cancelled: fenced.get(3),
            stale_accepted,
            lost_updates,
            plain_lost_updates,
            plain_overlaps,
            fenced_overlaps,
            unavailable,
            slept_past_release,
            errors,
        })
    }

    /// The names that stayed untaken past `TTL` + slack after their
    /// holder was lost.
    fn stuck(&self) -> usize {
        self.unavailable
            .iter()
            .filter(|(_, _, took)| {
                took.is_none_or(|took| took > self.context.store.longest_lease(TTL) + STUCK_SLACK)
            })
            .count()
    }

    /// Fault kinds the store suffers that the run never injected.
    fn never_injected(&self) -> Vec<FaultKind> {
        self.context
            .supported
            .iter()
            .copied()
            .filter(|kind| !self.context.injected.iter().any(|f| f.kind == *kind))
            .collect()
    }

    /// Every figure that must be 0 and is not, said in a line each.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |figure: &str, value: i64| {
            if value != 0 {
                out.push(format!("{figure}: {value} (must be 0)"));
            }
        };
        check("stale writes accepted", self.stale_accepted);
        check("lost updates on the resource", self.lost_updates);
        check(
            "fenced reads refused (fences went back)",
            self.fenced_refused,
        );
        check(
            "leases left after the clean stop",
            self.context.leases_left.count() as i64,
        );
        check(
            "workers that did not stop cleanly",
            self.context.leases_left.unclean.len() as i64,
        );
        check("stuck names", self.stuck() as i64);
        if self.context.store.wakes_across_processes() {
            check(
                "waiters that slept past a release",
                self.slept_past_release.len() as i64,
            );
        }
        check(
            "unexplained overlaps",
            self.plain_overlaps
                .iter()
                .filter(|o| o.cause.is_none())
                .count() as i64,
        );
        check(
            "fault kinds never injected",
            self.never_injected().len() as i64,
        );
        out
    }

    /// The report as text.
    pub fn text(&self) -> String {
        let c = &self.context;
        let mut t = String::new();
        let _ = writeln!(
            t,
            "\nchaos report: store {}, seed {}, {:?} asked, {:.0} s run, {} workers, {} names, ttl {:?}",
            c.store,
            c.seed,
            c.duration,
            c.ran_for.as_secs_f64(),
            c.workers,
            c.names,
            TTL
        );
        let _ = writeln!(
            t,
            "replay: cargo run -p lock-tests --release --bin chaos -- --store {} --duration {}ms --seed {} --workers {} --names {}",
            c.store,
            c.duration.as_millis(),
            c.seed,
            c.workers,
            c.names
        );
        let _ = writeln!(
            t,
            "\noperations per worker (done / busy / lost lease / error)"
        );
        for (worker, [done, busy, lost, error]) in &self.per_worker {
            let _ = writeln!(t, "  {worker:<6} {done:>7} {busy:>7} {lost:>7} {error:>7}");
        }
        let _ = writeln!(t, "\nfaults injected");
        for (kind, count) in self.injected_by_kind() {
            let _ = writeln!(t, "  {:<10} {count}", kind.name());
        }
        for (kind, why) in &c.skipped {
            let _ = writeln!(t, "  {:<10} skipped: {why}", kind.name());
        }
        if c.faults_left_out > 0 {
            let _ = writeln!(
                t,
                "  ({} more left out: their target was still under an earlier fault)",
                c.faults_left_out
            );
        }
        for failure in &c.fault_failures {
            let _ = writeln!(t, "  FAILED     {failure}");
        }
        let _ = writeln!(t, "\nfenced resource");
        if c.store.fences() {
            let _ = writeln!(
                t,
                "  writes accepted                    {}",
                self.fenced_accepted
            );
            let _ = writeln!(
                t,
                "  stale writes rejected by the fence {}",
                self.fenced_rejected
            );
            let _ = writeln!(
                t,
                "  work cancelled on a lost lease     {}",
                self.fenced_cancelled
            );
            let _ = writeln!(
                t,
                "  stale writes accepted              {}   (must be 0)",
                self.stale_accepted
            );
            let _ = writeln!(
                t,
                "  lost updates                       {}   (must be 0)",
                self.lost_updates
            );
            let _ = writeln!(
                t,
                "  reads refused, fence went back     {}   (must be 0)",
                self.fenced_refused
            );
            let _ = writeln!(
                t,
                "  overlapping fenced sections        {}   (harmless: the fence decides)",
                self.fenced_overlaps.len()
            );
        } else {
            let _ = writeln!(t, "  not run: {} issues no fencing tokens", c.store);
        }
        let _ = writeln!(t, "\nunfenced critical sections");
        let longest = self
            .plain_overlaps
            .iter()
            .map(|o| o.length)
            .max()
            .unwrap_or_default();
        let _ = writeln!(
            t,
            "  overlaps                           {}   (longest {:?})",
            self.plain_overlaps.len(),
            longest
        );
        for (cause, count) in self.overlaps_by_cause() {
            let _ = writeln!(t, "    caused by {cause:<24} {count}");
        }
        let _ = writeln!(
            t,
            "  lost updates on the plain counter  {}   (what the overlaps cost)",
            self.plain_lost_updates
        );
        let _ = writeln!(t, "\nleases and waiters");
        let left = &c.leases_left;
        let _ = writeln!(
            t,
            "  leases left after the clean stop   {}   (must be 0){}",
            left.count(),
            if left.names.is_empty() {
                String::new()
            } else {
                format!(" {:?}", left.names)
            }
        );
        for unclean in &left.unclean {
            let _ = writeln!(t, "  worker did not stop cleanly: {unclean}");
        }
        let longest = self
            .unavailable
            .iter()
            .filter_map(|(_, _, took)| *took)
            .max();
        let _ = writeln!(
            t,
            "  longest a name stayed untaken after its holder was lost: {} against a ttl of {:?} ({} faults measured; stuck: {}, must be 0)",
            longest.map_or("-".to_owned(), |d| format!("{:.2} s", d.as_secs_f64())),
            TTL,
            self.unavailable.len(),
            self.stuck()
        );
        let wake = if c.store.wakes_across_processes() {
            "(must be 0)".to_owned()
        } else {
            "(expected: no cross-process wakeups; waiters sleep to the holder's TTL)".to_owned()
        };
        let _ = writeln!(
            t,
            "  waiters that slept past a release  {}   {wake}",
            self.slept_past_release.len()
        );
        for slept in &self.slept_past_release {
            let _ = writeln!(
                t,
                "    {} released by {} at {:.1} s, free for {:.1} s while {} waited; faults nearby: {}",
                slept.lock,
                slept.holder,
                slept.at,
                slept.free_for,
                slept.waiter,
                if slept.nearby.is_empty() {
                    "none".to_owned()
                } else {
                    slept.nearby.join(", ")
                }
            );
        }
        if !self.errors.is_empty() {
            let _ = writeln!(
                t,
                "\nerrors seen by the workers (during faults), most frequent first"
            );
            for (message, count) in &self.errors {
                let _ = writeln!(t, "  {count:>6}  {message}");
            }
        }
        let violations = self.violations();
        if violations.is_empty() {
            let _ = writeln!(t, "\nresult: every must-be-0 figure is 0");
        } else {
            let _ = writeln!(t, "\nresult: FAILED");
            for violation in violations {
                let _ = writeln!(t, "  {violation}");
            }
        }
        t
    }

    fn injected_by_kind(&self) -> BTreeMap<FaultKind, usize> {
        let mut counts = BTreeMap::new();
        for kind in &self.context.supported {
            counts.insert(*kind, 0);
        }
        for fault in &self.context.injected {
            *counts.entry(fault.kind).or_insert(0) += 1;
        }
        counts
    }

    fn overlaps_by_cause(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for overlap in &self.plain_overlaps {
            let cause = overlap
                .cause
                .map_or("nothing (UNEXPLAINED)".to_owned(), |kind| {
                    kind.name().to_owned()
                });
            *counts.entry(cause).or_insert(0) += 1;
        }
        counts
    }

    /// The report as JSON.
    pub fn json(&self) -> String {
        let c = &self.context;
        let overlaps = |list: &[Overlap]| {
            list.iter()
                .map(|o| {
                    json!({
                        "lock": o.lock,
                        "holders": [o.holders.0, o.holders.1],
                        "seconds": o.length.as_secs_f64(),
                        "cause": o.cause.map(FaultKind::name),
                    })
                })
                .collect::<Vec<_>>()
        };
        let value = json!({
            "store": c.store.name(),
            "seed": c.seed,
            "duration_s": c.duration.as_secs(),
            "ran_s": c.ran_for.as_secs_f64(),
            "workers": c.workers,
            "names": c.names,
            "ttl_s": TTL.as_secs(),
            "operations": self.per_worker.iter().map(|(w, [done, busy, lost, error])| {
                json!({"worker": w, "done": done, "busy": busy, "lost": lost, "errors": error})
            }).collect::<Vec<_>>(),
            "faults": {
                "injected": self.injected_by_kind().into_iter().map(|(k, n)| (k.name().to_owned(), n)).collect::<BTreeMap<_, _>>(),
                "skipped": c.skipped.iter().map(|(k, why)| (k.name().to_owned(), *why)).collect::<BTreeMap<_, _>>(),
                "failed": c.fault_failures,
                "left_out": c.faults_left_out,
                "list": c.injected.iter().map(|f| json!({"kind": f.kind.name(), "target": f.target, "detail": f.detail})).collect::<Vec<_>>(),
            },
            "fenced": {
                "supported": c.store.fences(),
                "writes_accepted": self.fenced_accepted,
                "stale_writes_rejected": self.fenced_rejected,
                "cancelled_on_lost_lease": self.fenced_cancelled,
                "stale_writes_accepted": self.stale_accepted,
                "lost_updates": self.lost_updates,
                "reads_refused_fence_went_back": self.fenced_refused,
                "overlaps": overlaps(&self.fenced_overlaps),
            },
            "unfenced": {
                "overlaps": overlaps(&self.plain_overlaps),
                "lost_updates": self.plain_lost_updates,
            },
            "leases_left": c.leases_left.count(),
            "leases_left_names": c.leases_left.names,
            "workers_not_stopped_cleanly": c.leases_left.unclean,
            "unavailable_after_holder_lost": self.unavailable.iter().map(|(kind, target, took)| {
                json!({"fault": kind.name(), "target": target, "seconds": took.map(|d| d.as_secs_f64())})
            }).collect::<Vec<_>>(),
            "stuck_names": self.stuck(),
            "waiters_slept_past_release": self.slept_past_release.len(),
            "waiters_slept_past_release_list": self.slept_past_release.iter().map(|slept| json!({
                "lock": slept.lock,
                "holder": slept.holder,
                "waiter": slept.waiter,
                "released_at_s": slept.at,
                "free_for_s": slept.free_for,
                "faults_nearby": slept.nearby,
            })).collect::<Vec<_>>(),
            "errors": self.errors.iter().map(|(m, n)| json!({"message": m, "count": n})).collect::<Vec<_>>(),
            "violations": self.violations(),
        });
        serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
    }
}

/// The faults as recorded, on the server's clock (seconds since the epoch).
struct Faults(Vec<(FaultKind, String, f64, f64)>);

impl Faults {
    async fn read(client: &Client, s: &str) -> Result<Faults, String> {
        let rows = client
            .query(
                &format!(
                    "SELECT kind, target, extract(epoch FROM started)::float8,
                            extract(epoch FROM coalesce(ended, started))::float8
                     FROM \"{s}\".faults"
                ),
                &[],
            )
            .await
            .map_err(|e| format!("reading the faults: {e}"))?;
        Ok(Faults(
            rows.iter()
                .filter_map(|row| {
                    let kind = FaultKind::parse(row.get::<_, &str>(0))?;
                    Some((kind, row.get(1), row.get(2), row.get(3)))
                })
                .collect(),
        ))
    }

    /// The fault that explains two critical sections of one lock on
    /// `store` running at once: a fault that can lose a lease there (see
    /// [`StoreKind::loses_leases_to`]), on the earlier holder (`earlier`,
    /// whose section ran from `from`) or on the store, before the later
    /// section started at `to`; or a pause of the later holder in the
    /// lease's time before its section started (it acquired, froze, and
    /// came back with its lease gone).
    fn explaining(
        &self,
        store: StoreKind,
        (earlier, from): (&str, f64),
        (later, to): (&str, f64),
    ) -> Option<FaultKind> {
        let lease = store.longest_lease(TTL).as_secs_f64();
        self.0
            .iter()
            .filter(|(kind, target, started, ended)| {
                if !store.loses_leases_to(*kind) {
                    return false;
                }
                let on_earlier =
                    (target == earlier || target == "store") && *started <= to && *ended >= from;
                let on_later = *kind == FaultKind::Pause
                    && target == later
                    && *started <= to
                    && *ended >= to - lease - 1.0;
                on_earlier || on_later
            })
            .map(|(kind, ..)| *kind)
            .min()
    }

    /// The faults active within `margin` seconds of `at`, as `kind target`.
    fn near(&self, at: f64, margin: f64) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, _, started, ended)| *started <= at + margin && *ended >= at - margin)
            .map(|(kind, target, ..)| format!("{kind} {target}"))
            .collect()
    }

    /// Whether a failover was on between `from` and `to`.
    fn failover(&self, from: f64, to: f64) -> bool {
        self.0.iter().any(|(kind, _, started, ended)| {
            *kind == FaultKind::Failover && *started <= to && *ended >= from
        })
    }

    /// Whether a store-wide fault was on between `from` and `to`.
    fn store_wide(&self, from: f64, to: f64) -> bool {
        self.0
            .iter()
            .any(|(kind, _, started, ended)| kind.store_wide() && *started <= to && *ended >= from)
    }

    /// Whether a release by `holder` may have gone unheard by `waiter`, or
    /// not happened, for a reason other than a lost wakeup, between `from`
    /// and `to`: any fault but a clock jump on either of them (a release
    /// that failed on a cut or held connection and is retried; a
    /// subscription cut and reconnecting with backoff; a wakeup held back
    /// by a delay; a holder killed between its section and its release), a
    /// pause of anyone (a worker frozen between its acquire and its
    /// section holds the lock with no section open), or a store-wide fault.
    fn excuses_wait(&self, holder: &str, waiter: &str, from: f64, to: f64) -> bool {
        self.0.iter().any(|(kind, target, started, ended)| {
            let relevant = kind.store_wide()
                || *kind == FaultKind::Pause
                || (*kind != FaultKind::Clock && (target == holder || target == waiter));
            relevant && *started <= to && *ended >= from
        })
    }
}

/// Pairs of critical sections of one lock that ran at once. A killed
/// worker's open section ends at its kill.
async fn overlaps(
    client: &Client,
    s: &str,
    (store, mode): (StoreKind, &str),
    faults: &Faults,
) -> Result<Vec<Overlap>, String> {
    let rows = client
        .query(
            &format!(
                "WITH iv AS (
                    SELECT i.id, i.name, i.worker, i.started,
                           coalesce(i.ended, (SELECT min(f.started) FROM \"{s}\".faults f
                                              WHERE f.kind = 'kill' AND f.target = i.worker
                                                AND f.started >= i.started)) AS e
                    FROM \"{s}\".intervals i WHERE i.mode = $1)
                 SELECT a.name, a.worker, b.worker,
                        extract(epoch FROM a.started)::float8, extract(epoch FROM b.started)::float8,
                        extract(epoch FROM least(a.e, b.e) - b.started)::float8
                 FROM iv a JOIN iv b ON a.name = b.name AND a.id <> b.id
                   AND (a.started, a.id) < (b.started, b.id) AND b.started < a.e"
            ),
            &[&mode],
        )
        .await
        .map_err(|e| format!("finding overlaps: {e}"))?;
    Ok(rows
        .iter()
        .map(|row| {
            let (earlier, later): (String, String) = (row.get(1), row.get(2));
            let (from, to): (f64, f64) = (row.get(3), row.get(4));
            let cause = faults.explaining(store, (&earlier, from), (&later, to));
            Overlap {
                lock: format!("{} {mode}", row.get::<_, String>(0)),
                holders: (earlier, later),
                length: Duration::from_secs_f64(row.get::<_, f64>(5).max(0.0)),
                cause,
            }
        })
        .collect())
}

/// For each kill, pause or partition of a worker that held locks at that
/// moment: how long until another worker took each of them (the longest
/// per fault; `None`: never). Left out: faults with a store-wide fault in
/// the time the names should have been taken in (nobody can take anything
/// then) or, on etcd, a failover shortly before it (a new leader renews
/// every lease), and
/// names never taken when the run ended before that time was up.
async fn unavailability(
    client: &Client,
    s: &str,
    store: StoreKind,
    faults: &Faults,
) -> Result<Vec<(FaultKind, String, Option<Duration>)>, String> {
    let limit = (store.longest_lease(TTL) + STUCK_SLACK).as_secs_f64();
    let end: Option<f64> = client
        .query_one(
            &format!("SELECT extract(epoch FROM max(finished))::float8 FROM \"{s}\".attempts"),
            &[],
        )
        .await
        .map_err(|e| format!("reading the run's end: {e}"))?
        .get(0);
    let rows = client
        .query(
            &format!(
                "SELECT f.kind, f.target, extract(epoch FROM f.started)::float8,
                        max(extract(epoch FROM taken.at - f.started))::float8,
                        bool_or(taken.at IS NULL)
                 FROM \"{s}\".faults f
                 JOIN \"{s}\".intervals i ON i.worker = f.target AND i.started <= f.started
                   AND coalesce(i.ended, 'infinity') > f.started
                 CROSS JOIN LATERAL (
                    SELECT min(n.started) AS at FROM \"{s}\".intervals n
                    WHERE n.name = i.name AND n.mode = i.mode AND n.started > f.started
                      AND n.worker <> i.worker) taken
                 WHERE f.kind IN ('kill', 'pause', 'partition')
                 GROUP BY f.id, f.kind, f.target, f.started"
            ),
            &[],
        )
        .await
        .map_err(|e| format!("measuring unavailability: {e}"))?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            let kind = FaultKind::parse(row.get::<_, &str>(0))?;
            let target: String = row.get(1);
            let at: f64 = row.get(2);
            let longest: Option<f64> = row.get(3);
            let never: Option<bool> = row.get(4);
            let took = if never == Some(true) {
                None
            } else {
                longest.map(|s| Duration::from_secs_f64(s.max(0.0)))
            };
            // On etcd a leader change shortly before counts too: the new
            // leader renews every lease for a full TTL and more when it
            // takes over, so a lease lost soon after outlives its TTL.
            if faults.store_wide(at, at + limit)
                || (store == StoreKind::Etcd && faults.failover(at - limit, at))
            {
                return None;
            }
            if took.is_none() && end.is_none_or(|end| end - at < limit) {
                return None;
            }
            Some((kind, target, took))
        })
        .collect())
}

/// A release after which the lock stayed free while another worker waited.
#[derive(Clone, Debug)]
pub struct Slept {
    /// The name and mode.
    pub lock: String,
    /// Who released it.
    pub holder: String,
    /// Who waited (the first of them).
    pub waiter: String,
    /// When, in seconds from the first call of the run.
    pub at: f64,
    /// How long it then stayed free.
    pub free_for: f64,
    /// The faults within 3 s of the release (`kind target`).
    pub nearby: Vec<String>,
}

/// Releases after which the lock stayed free for longer than
/// [`WAKE_SLACK`] although another worker was waiting for it. The window
/// is excused when the releasing or the waiting worker was paused,
/// partitioned or having its connections cut in it (a waiter whose
/// subscription keeps being cut reconnects with backoff, and hears nothing
/// meanwhile), or a store-wide fault was on.
async fn slept_past_release(
    client: &Client,
    s: &str,
    faults: &Faults,
) -> Result<Vec<Slept>, String> {
    let rows = client
        .query(
            &format!(
                "WITH rel AS (
                    SELECT i.name, i.mode, i.worker, i.ended AS released,
                           (SELECT min(n.started) FROM \"{s}\".intervals n
                            WHERE n.name = i.name AND n.mode = i.mode AND n.started > i.ended) AS next
                    FROM \"{s}\".intervals i
                    WHERE i.ended IS NOT NULL AND NOT i.cancelled),
                 waits AS (
                    SELECT a.name, a.mode, a.worker, a.wait_started,
                           coalesce((SELECT n.started FROM \"{s}\".intervals n WHERE n.id = a.interval_id),
                                    a.finished) AS served
                    FROM \"{s}\".attempts a)
                 SELECT r.worker, w.worker, extract(epoch FROM r.released)::float8,
                        extract(epoch FROM coalesce(r.next, clock_timestamp()))::float8,
                        r.name || ' ' || r.mode,
                        extract(epoch FROM (SELECT min(wait_started) FROM \"{s}\".attempts))::float8
                 FROM rel r JOIN waits w ON w.name = r.name AND w.mode = r.mode
                   AND w.worker <> r.worker AND w.wait_started < r.released
                   AND w.served > r.released + $1::float8 * interval '1 second'
                 WHERE coalesce(r.next, clock_timestamp()) > r.released + $1::float8 * interval '1 second'
                 ORDER BY r.released"
            ),
            &[&WAKE_SLACK.as_secs_f64()],
        )
        .await
        .map_err(|e| format!("finding waiters that slept past a release: {e}"))?;
    let mut seen = std::collections::HashSet::new();
    let mut slept = Vec::new();
    for row in &rows {
        let (holder, waiter): (String, String) = (row.get(0), row.get(1));
        let (released, next): (f64, f64) = (row.get(2), row.get(3));
        if faults.excuses_wait(&holder, &waiter, released - 1.0, next) {
            continue;
        }
        // One per release, however many waited.
        if !seen.insert((holder.clone(), released.to_bits())) {
            continue;
        }
        let origin: f64 = row.get::<_, Option<f64>>(5).unwrap_or(released);
        slept.push(Slept {
            lock: row.get(4),
            holder,
            waiter,
            at: released - origin,
            free_for: next - released,
            nearby: faults.near(released, 3.0),
        });
    }
    Ok(slept)
}
