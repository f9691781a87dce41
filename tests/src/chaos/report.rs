//! The report: every figure computed from the run's records, printed and
//! as JSON, and the figures that must be 0 and those that must not be.
//!
//! | figure | must be | from |
//! |---|---|---|
//! | stale writes accepted | 0 | a fenced write accepted although another holder read the row between its read and its write (row versions, no clocks) |
//! | lost updates on the resource | 0 | accepted writes minus the row's value |
//! | fenced reads refused | 0 | a new holder whose fence was lower than one the row had already seen: the store's fences went back |
//! | fences handed out twice | 0 | two fenced sections of one name with the same fencing token: tokens must strictly grow, and a handover that reuses one passes the resource's `seen <= fence` check |
//! | unexplained overlaps | 0 | two sections of one lock at once, fenced or plain, with no fault to explain it (see [`explain`](super::explain)) |
//! | leases left after the clean stop | 0 | the store, checked for every lease each worker held at or after the stop as it ends, then for every name |
//! | stuck names | 0 | a name refused to another worker `TTL` + slack after its holder was killed, paused or cut off, before anyone took it |
//! | waiters that slept past a release | 0 | a call waiting when the lock was released, nobody served within [`WAKE_SLACK`] (memcached has no cross-process wakeups) |
//! | waiting calls that polled the store | 0 | a call that sent more acquire attempts than 10, plus 2 for each release of its lock while it waited, plus 2 a second it lasted: a waiter wakes on a release, an expiry or its deadline, never on a fixed short timer |
//! | calls that gave up early | 0 | a call that answered "busy" (`Ok(None)`) before its wait was out: a waiter that stops waiting while the lock may still come free |
//! | stalled workers | 0 | a fault-free stretch of 3 TTLs in which a worker finished no call (a body that ran, or a clean `None`) and began no body |
//! | fault kinds never injected | 0 | a kind the store suffers that the run did not manage to inject |
//! | renewals performed | above 0 | extends the store accepted for the calls' leases |
//! | sections longer than the TTL | above 0 | sections that finished, their lease kept alive past its TTL |
//! | stale writes rejected | above 0 (fencing stores) | a fenced write the fence refused: the fence was tested |

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::json;
use tokio_postgres::Client;

use super::explain::{Faults, Side, stalls, worker_key};
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
    pub skipped: Vec<(FaultKind, String)>,
    /// Faults injected.
    pub injected: Vec<Injected>,
    /// Faults that could not be injected, with why.
    pub fault_failures: Vec<String>,
    /// Faults left out because their target was still under an earlier
    /// one.
    pub faults_left_out: usize,
    /// What the clean stop left.
    pub leases_left: LeasesLeft,
    /// The workers every call is recorded under (`w0`... one per slot, or
    /// per task of the memory store's process): each must keep finishing
    /// calls.
    pub workers_expected: Vec<String>,
    /// From when to when the workers were told to work, on the server's
    /// clock (seconds since the epoch): the stretch their progress is
    /// measured over.
    pub working: (f64, f64),
    /// Whether the run must show the leases exercised (renewals, sections
    /// past the TTL, stale writes the fence rejected): true for every real
    /// run; false only for records written by hand to test one figure.
    pub expects_activity: bool,
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

/// A worker that finished no call for a fault-free stretch of 3 TTLs.
#[derive(Clone, Debug)]
pub struct Stall {
    /// The worker (its slot: `w3`).
    pub worker: String,
    /// When the stretch began, in seconds from the start of the workload.
    pub from: f64,
    /// How long it lasted.
    pub length: f64,
}

/// Counts of the sections and calls, the denominators of the figures.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    /// Sections, fenced and plain.
    pub sections: (i64, i64),
    /// Fenced sections that claimed the row (read it).
    pub claims: i64,
    /// Plain writes of the counter.
    pub plain_writes: i64,
    /// Extends the store accepted for the calls' leases.
    pub renewals: i64,
    /// Sections that finished after more than a TTL.
    pub longer_than_ttl: i64,
    /// Releases with another worker waiting.
    pub releases_waited_on: i64,
}

/// Every figure of a run.
#[derive(Clone, Debug)]
pub struct Report {
    pub(super) context: Context,
    /// Per worker slot: calls done (the body ran), busy, lost, errors.
    pub(super) per_worker: Vec<(String, [i64; 4])>,
    pub(super) fenced_accepted: i64,
    pub(super) fenced_rejected: i64,
    pub(super) fenced_refused: i64,
    /// `name: fence` for each fencing token two sections of one name got.
    pub(super) fences_twice: Vec<String>,
    /// `worker lock: busy after s of a wait of w`, for each call that
    /// answered busy before its wait was out.
    pub(super) gave_up_early: Vec<String>,
    pub(super) fenced_cancelled: i64,
    pub(super) stale_accepted: i64,
    pub(super) lost_updates: i64,
    pub(super) plain_lost_updates: i64,
    pub(super) plain_overlaps: Vec<Overlap>,
    pub(super) fenced_overlaps: Vec<Overlap>,
    /// Per fault on a holder: how long the names it held stayed untaken,
    /// and whether one was stuck.
    pub(super) unavailable: Vec<Unavailable>,
    pub(super) slept_past_release: Vec<Slept>,
    pub(super) stalls: Vec<Stall>,
    /// What became of each write a holder was frozen before.
    pub(super) frozen_writes: Vec<String>,
    /// The calls that sent the store more acquire attempts than waking on
    /// releases and expiries explains, and the most attempts per second of
    /// any call.
    pub(super) polled: Polled,
    pub(super) totals: Totals,
    pub(super) errors: Vec<(String, i64)>,
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
                 CREATE INDEX ON \"{s}\".attempts (interval_id);
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
                        count(*) FILTER (WHERE cancelled),
                        count(*) FILTER (WHERE claim_version IS NOT NULL)
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
            format!(
                "SELECT coalesce(sum(writes - value), 0)::bigint, coalesce(sum(writes), 0)::bigint
                 FROM \"{s}\".{table}"
            )
        };
        let lost_updates: i64 = client
            .query_one(&lost("resource"), &[])
            .await
            .map_err(q)?
            .get(0);
        let plain = client.query_one(&lost("counter"), &[]).await.map_err(q)?;
        let totals = totals(client, s).await?;
        let faults = Faults::read(client, s).await?;
        let plain_overlaps = overlaps(client, s, (context.store, "plain"), &faults).await?;
        let fenced_overlaps = overlaps(client, s, (context.store, "fenced"), &faults).await?;
        let unavailable = unavailability(client, s, context.store, &faults).await?;
        let (slept_past_release, releases_waited_on) =
            slept_past_release(client, s, &faults).await?;
        let stalls = progress(client, s, &context, &faults).await?;
        let frozen_writes = frozen_writes(client, s).await?;
        let polled = polled(client, s).await?;
        let fences_twice = client
            .query(
                &format!(
                    "SELECT name || ': ' || fence || ' (' || string_agg(worker, ', ' ORDER BY started) || ')'
                     FROM \"{s}\".intervals WHERE mode = 'fenced' AND fence IS NOT NULL
                     GROUP BY name, fence HAVING count(*) > 1 ORDER BY 1"
                ),
                &[],
            )
            .await
            .map_err(q)?
            .iter()
            .map(|row| row.get(0))
            .collect();
        let gave_up_early = gave_up_early(client, s).await?;
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
            fences_twice,
            gave_up_early,
            fenced_cancelled: fenced.get(3),
            stale_accepted,
            lost_updates,
            plain_lost_updates: plain.get(0),
            plain_overlaps,
            fenced_overlaps,
            unavailable,
            slept_past_release,
            stalls,
            frozen_writes,
            polled,
            totals: Totals {
                claims: fenced.get(4),
                plain_writes: plain.get(1),
                releases_waited_on,
                ..totals
            },
            errors,
        })
    }

    /// The faults after which a name their target held was refused to
    /// another worker past its longest lease + slack.
    pub(super) fn stuck(&self) -> usize {
        self.unavailable.iter().filter(|lost| lost.stuck).count()
    }

    /// Fault kinds the store suffers that the run never injected.
    pub(super) fn never_injected(&self) -> Vec<FaultKind> {
        self.context
            .supported
            .iter()
            .copied()
            .filter(|kind| !self.context.injected.iter().any(|f| f.kind == *kind))
            .collect()
    }

    /// The overlaps no fault explains, fenced and plain.
    pub(super) fn unexplained(&self) -> (usize, usize) {
        let count = |list: &[Overlap]| list.iter().filter(|o| o.cause.is_none()).count();
        (count(&self.fenced_overlaps), count(&self.plain_overlaps))
    }

    /// Every figure that fails the run, said in a line each: one that must
    /// be 0 and is not, or one that must be above 0 (the leases were
    /// exercised) and is not.
    pub fn violations(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut check = |figure: &str, value: i64| {
            if value != 0 {
                out.push(format!("{figure}: {value} (must be 0)"));
            }
        };
        let (fenced, plain) = self.unexplained();
        check("stale writes accepted", self.stale_accepted);
        check("lost updates on the resource", self.lost_updates);
        check(
            "fenced reads refused (fences went back)",
            self.fenced_refused,
        );
        check("fences handed out twice", self.fences_twice.len() as i64);
        check("unexplained overlaps of fenced sections", fenced as i64);
        check("unexplained overlaps of plain sections", plain as i64);
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
        check("stalled workers", self.stalls.len() as i64);
        check(
            "waiting calls that polled the store",
            self.polled.calls.len() as i64,
        );
        check(
            "calls that gave up before their wait was out",
            self.gave_up_early.len() as i64,
        );
        check(
            "fault kinds never injected",
            self.never_injected().len() as i64,
        );
        if self.context.expects_activity {
            let mut exercised = |figure: &str, value: i64| {
                if value == 0 {
                    out.push(format!(
                        "{figure}: 0 (must be above 0: otherwise the run did not test it)"
                    ));
                }
            };
            exercised("renewals performed", self.totals.renewals);
            exercised("sections longer than the TTL", self.totals.longer_than_ttl);
            if self.context.store.fences() {
                exercised("stale writes rejected by the fence", self.fenced_rejected);
            }
        }
        out
    }

    pub(super) fn injected_by_kind(&self) -> BTreeMap<FaultKind, usize> {
        let mut counts = BTreeMap::new();
        for kind in &self.context.supported {
            counts.insert(*kind, 0);
        }
        for fault in &self.context.injected {
            *counts.entry(fault.kind).or_insert(0) += 1;
        }
        counts
    }

    pub(super) fn overlaps_by_cause(list: &[Overlap]) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for overlap in list {
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
        let t = &self.totals;
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
                "skipped": c.skipped.iter().map(|(k, why)| (k.name().to_owned(), why.clone())).collect::<BTreeMap<_, _>>(),
                "failed": c.fault_failures,
                "left_out": c.faults_left_out,
                "list": c.injected.iter().map(|f| json!({"kind": f.kind.name(), "target": f.target, "detail": f.detail})).collect::<Vec<_>>(),
            },
            "sections": {
                "fenced": t.sections.0,
                "plain": t.sections.1,
                "longer_than_ttl": t.longer_than_ttl,
                "renewals": t.renewals,
            },
            "fenced": {
                "supported": c.store.fences(),
                "claims": t.claims,
                "writes_accepted": self.fenced_accepted,
                "stale_writes_rejected": self.fenced_rejected,
                "cancelled_on_lost_lease": self.fenced_cancelled,
                "stale_writes_accepted": self.stale_accepted,
                "lost_updates": self.lost_updates,
                "reads_refused_fence_went_back": self.fenced_refused,
                "fences_handed_out_twice": self.fences_twice,
                "overlaps": overlaps(&self.fenced_overlaps),
                "unexplained_overlaps": self.unexplained().0,
            },
            "unfenced": {
                "overlaps": overlaps(&self.plain_overlaps),
                "unexplained_overlaps": self.unexplained().1,
                "writes": t.plain_writes,
                "lost_updates": self.plain_lost_updates,
            },
            "leases_left": c.leases_left.count(),
            "leases_left_names": c.leases_left.names,
            "leases_looked_for": c.leases_left.reported,
            "workers_stopped_in_s": c.leases_left.stopped_in.as_secs_f64(),
            "workers_not_stopped_cleanly": c.leases_left.unclean,
            "unavailable_after_holder_lost": self.unavailable.iter().map(|lost| {
                json!({
                    "fault": lost.kind.name(),
                    "target": lost.target,
                    "seconds": lost.took.map(|d| d.as_secs_f64()),
                    "stuck": lost.stuck,
                })
            }).collect::<Vec<_>>(),
            "stuck_names": self.stuck(),
            "releases_waited_on": t.releases_waited_on,
            "waiters_slept_past_release": self.slept_past_release.len(),
            "waiters_slept_past_release_list": self.slept_past_release.iter().map(|slept| json!({
                "lock": slept.lock,
                "holder": slept.holder,
                "waiter": slept.waiter,
                "released_at_s": slept.at,
                "free_for_s": slept.free_for,
                "faults_nearby": slept.nearby,
            })).collect::<Vec<_>>(),
            "frozen_writes": self.frozen_writes,
            "gave_up_early": self.gave_up_early,
            "polled": {
                "calls": self.polled.calls,
                "most_attempts_per_second": self.polled.most_per_second,
                "most_attempts": self.polled.most,
            },
            "stalled_workers": self.stalls.iter().map(|stall| json!({
                "worker": stall.worker,
                "from_s": stall.from,
                "seconds": stall.length,
            })).collect::<Vec<_>>(),
            "errors": self.errors.iter().map(|(m, n)| json!({"message": m, "count": n})).collect::<Vec<_>>(),
            "violations": self.violations(),
        });
        serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
    }
}

/// The sections, renewals and long sections of the run.
async fn totals(client: &Client, s: &str) -> Result<Totals, String> {
    let row = client
        .query_one(
            &format!(
                "SELECT
                    count(*) FILTER (WHERE i.mode = 'fenced'),
                    count(*) FILTER (WHERE i.mode = 'plain'),
                    count(*) FILTER (WHERE i.ended - i.started > $1::float8 * interval '1 second'
                                     AND NOT i.cancelled AND a.outcome IN ('written', 'ran')),
                    (SELECT coalesce(sum(renewals), 0)::bigint FROM \"{s}\".attempts)
                 FROM \"{s}\".intervals i LEFT JOIN \"{s}\".attempts a ON a.interval_id = i.id"
            ),
            &[&TTL.as_secs_f64()],
        )
        .await
        .map_err(|e| format!("counting the sections: {e}"))?;
    Ok(Totals {
        sections: (row.get(0), row.get(1)),
        longer_than_ttl: row.get(2),
        renewals: row.get(3),
        ..Totals::default()
    })
}

/// Pairs of critical sections of one lock that ran at once, each matched
/// to the fault that explains it. A killed worker's open section ends at
/// its kill (one whose start was recorded as the kill was under way, the
/// signal on its way, ends there too); any other section left open (a worker that died on its own,
/// a rival cut off as the run ended) lasts until the records are read.
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
                           coalesce(i.requested, i.started) AS requested,
                           coalesce(i.ended, (SELECT min(greatest(f.started, i.started))
                                              FROM \"{s}\".faults f
                                              WHERE f.kind = 'kill'
                                                AND (f.target = i.worker OR i.worker LIKE f.target || '.%')
                                                AND f.ended >= i.started),
                                    clock_timestamp()) AS e
                    FROM \"{s}\".intervals i WHERE i.mode = $1)
                 SELECT a.name, a.worker, b.worker,
                        extract(epoch FROM a.requested)::float8, extract(epoch FROM a.started)::float8,
                        extract(epoch FROM b.requested)::float8, extract(epoch FROM b.started)::float8,
                        extract(epoch FROM least(a.e, b.e) - b.started)::float8,
                        extract(epoch FROM a.e)::float8, extract(epoch FROM b.e)::float8
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
            let name: String = row.get(0);
            let (earlier, later): (String, String) = (row.get(1), row.get(2));
            let a = Side {
                worker: &earlier,
                requested: row.get(3),
                started: row.get(4),
                ended: row.get(8),
            };
            let b = Side {
                worker: &later,
                requested: row.get(5),
                started: row.get(6),
                ended: row.get(9),
            };
            let cause = faults.explaining(store, &format!("{mode}:{name}"), a, b);
            Overlap {
                lock: format!("{name} {mode}"),
                length: Duration::from_secs_f64(row.get::<_, f64>(7).max(0.0)),
                holders: (earlier, later),
                cause,
            }
        })
        .collect())
}

/// Calls that polled the store, and the most attempts any call sent.
#[derive(Clone, Debug, Default)]
pub struct Polled {
    /// `worker lock: n attempts in s seconds`, for each call over the
    /// bound.
    pub calls: Vec<String>,
    /// The most acquire attempts one call sent per second it lasted (calls
    /// of a second or more).
    pub most_per_second: f64,
    /// The most acquire attempts one call sent.
    pub most: i64,
}

/// The calls that sent more acquire attempts than [`POLL_BASE`], plus
/// [`PER_RELEASE`] for each release of their lock while they waited (each
/// may wake them, and under contention each does), plus [`POLL_RATE`] per
/// second they lasted (an expiry, its jitter, a resubscription that wakes
/// every waiter), plus one for each time a drop fault cut the worker's
/// connections while it waited (each cut may lose a release, so the store
/// wakes every waiter once it listens again). A waiter tries once, then again when a release wakes it,
/// when the holder's lease should have run out, and at its deadline. A
/// waiter that naps a fixed short time between tries sends 20 a second
/// and more, releases or not: a rate alone cannot tell it from a waiter on
/// a busy name woken by each of 20 releases a second, the releases can.
async fn polled(client: &Client, s: &str) -> Result<Polled, String> {
    let rows = client
        .query(
            &format!(
                "SELECT a.worker, a.name || ' ' || a.mode, a.store_attempts,
                        extract(epoch FROM a.finished - a.wait_started)::float8,
                        (SELECT count(*) FROM \"{s}\".intervals i
                         WHERE i.name = a.name AND i.mode = a.mode
                           AND i.ended > a.wait_started AND i.ended < a.finished),
                        (SELECT count(*) FROM \"{s}\".faults f
                         WHERE f.kind = 'drop'
                           AND (f.target = a.worker OR a.worker LIKE f.target || '.%')
                           AND f.started < a.finished AND f.ended > a.wait_started)
                 FROM \"{s}\".attempts a"
            ),
            &[],
        )
        .await
        .map_err(|e| format!("reading the store attempts: {e}"))?;
    let mut polled = Polled::default();
    for row in &rows {
        let attempts = i64::from(row.get::<_, i32>(2));
        let seconds: f64 = row.get(3);
        let releases: i64 = row.get(4);
        let cuts = row.get::<_, i64>(5) * CUTS_PER_DROP;
        polled.most = polled.most.max(attempts);
        if seconds >= 1.0 {
            polled.most_per_second = polled.most_per_second.max(attempts as f64 / seconds);
        }
        let bound = POLL_BASE + PER_RELEASE * releases as f64 + cuts as f64 + POLL_RATE * seconds;
        if attempts as f64 > bound {
            polled.calls.push(format!(
                "{} {}: {attempts} attempts in {seconds:.2} s, {releases} releases meanwhile",
                row.get::<_, String>(0),
                row.get::<_, String>(1)
            ));
        }
    }
    Ok(polled)
}

/// See [`polled`].
const POLL_BASE: f64 = 10.0;

/// See [`polled`].
const PER_RELEASE: f64 = 2.0;

/// See [`polled`].
const POLL_RATE: f64 = 2.0;

/// How many times a drop fault cuts its worker's connections (see
/// `faults::drop`); each cut may wake every waiter of the worker once, as
/// the store listens again (see [`polled`]).
const CUTS_PER_DROP: i64 = 10;

/// How much sooner than its wait a busy call may end: none, but for the
/// rounding of the microseconds recorded.
const EARLY_SLACK_US: i64 = 1_000;

/// The calls that answered busy (`Ok(None)`) before their wait was out.
/// A call's wait is counted from before it began, so a waiter that waits
/// its wait out always ends after it.
async fn gave_up_early(client: &Client, s: &str) -> Result<Vec<String>, String> {
    let rows = client
        .query(
            &format!(
                "SELECT worker || ' ' || name || ' ' || mode || ': busy after '
                        || round(extract(epoch FROM finished - wait_started)::numeric, 3)
                        || ' s of a wait of ' || round(wait_us / 1e6, 3) || ' s'
                 FROM \"{s}\".attempts
                 WHERE outcome = 'busy' AND wait_us IS NOT NULL
                   AND finished - wait_started < (wait_us - $1) * interval '1 microsecond'
                 ORDER BY wait_started"
            ),
            &[&EARLY_SLACK_US],
        )
        .await
        .map_err(|e| format!("reading the busy calls: {e}"))?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// What became of the section frozen by each pause before a write: its
/// write rejected by the fence (what the fault is for), accepted, never
/// sent (the section dropped first), or never ended.
async fn frozen_writes(client: &Client, s: &str) -> Result<Vec<String>, String> {
    let rows = client
        .query(
            &format!(
                "SELECT f.target, i.name, i.fence,
                        CASE WHEN i.id IS NULL THEN 'no section found'
                             WHEN i.write_version IS NOT NULL THEN 'write accepted'
                             WHEN i.cancelled THEN 'dropped before its write was sent'
                             WHEN i.ended IS NULL THEN 'never ended'
                             ELSE 'write rejected by the fence' END
                 FROM \"{s}\".faults f
                 LEFT JOIN \"{s}\".intervals i ON i.worker = f.target AND i.mode = 'fenced'
                   AND i.started <= f.started AND coalesce(i.ended, 'infinity') >= f.started
                 WHERE f.kind = 'pause-write' ORDER BY f.started"
            ),
            &[],
        )
        .await
        .map_err(|e| format!("reading the frozen writes: {e}"))?;
    Ok(rows
        .iter()
        .map(|row| {
            format!(
                "{} {} (fence {}): {}",
                row.get::<_, String>(0),
                row.get::<_, Option<String>>(1).unwrap_or_default(),
                row.get::<_, Option<i64>>(2).unwrap_or_default(),
                row.get::<_, String>(3)
            )
        })
        .collect())
}

/// The workers that made no progress over a fault-free stretch of 3
/// TTLs: a worker whose store connection broke for good, or whose every
/// call fails, stops making progress without overlapping anyone. Progress
/// is a call that finished (a body that ran, or a clean `None`) or a body
/// that began: a long section runs up to 2 TTLs after a wait of up to
/// two thirds of one, so a finished call alone would come too rarely.
async fn progress(
    client: &Client,
    s: &str,
    context: &Context,
    faults: &Faults,
) -> Result<Vec<Stall>, String> {
    let rows = client
        .query(
            &format!(
                "SELECT worker, extract(epoch FROM finished)::float8 AS at FROM \"{s}\".attempts
                 WHERE outcome IN ('written', 'rejected', 'refused', 'ran', 'overran', 'busy')
                 UNION ALL
                 SELECT worker, extract(epoch FROM started)::float8 FROM \"{s}\".intervals
                 ORDER BY at"
            ),
            &[],
        )
        .await
        .map_err(|e| format!("reading the finished calls: {e}"))?;
    let mut finished: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for row in &rows {
        finished
            .entry(worker_key(row.get::<_, &str>(0)))
            .or_default()
            .push(row.get(1));
    }
    let calls = client
        .query(
            &format!(
                "SELECT worker, extract(epoch FROM wait_started)::float8,
                        extract(epoch FROM finished)::float8
                 FROM \"{s}\".attempts"
            ),
            &[],
        )
        .await
        .map_err(|e| format!("reading the calls: {e}"))?;
    let mut spans: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for row in &calls {
        spans
            .entry(worker_key(row.get::<_, &str>(0)))
            .or_default()
            .push((row.get(1), row.get(2)));
    }
    let at_least = (TTL * 3).as_secs_f64();
    let mut out = Vec::new();
    for worker in &context.workers_expected {
        let done = finished.get(worker.as_str()).map_or(&[][..], Vec::as_slice);
        let calls = spans.get(worker.as_str()).map_or(&[][..], Vec::as_slice);
        let outages = until_calls_in_flight_end(&faults.outages(worker), calls);
        for (from, length) in stalls(context.working, &outages, done, at_least) {
            out.push(Stall {
                worker: worker.clone(),
                from: from - context.working.0,
                length,
            });
        }
    }
    Ok(out)
}

/// `outages` (merged, in order), each lasting until the calls in flight
/// at its end (`calls`, as `(began, finished)`) have ended: a call the
/// fault caught may still wait for an answer the fault lost, up to its
/// store's call bound, and the worker can finish nothing else meanwhile.
fn until_calls_in_flight_end(outages: &[(f64, f64)], calls: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for &(from, to) in outages {
        let to = calls
            .iter()
            .filter(|&&(began, finished)| began < to && finished > to)
            .fold(to, |to, &(_, finished)| to.max(finished));
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
}

/// For each kill, pause (before a write or not) or partition of a worker
/// that held locks at that moment: how long until a new section took each
/// of them (another worker's, or the lost holder's own once its partition
/// or pause ended, under a fresh lease) (the longest per fault; `None`: never), and whether one stayed
/// stuck: refused to another worker (a call that ended `busy`) after its
/// lost lease must have ended, and before anyone took it. (A name nobody
/// asked for stays untaken without being stuck: with long sections about,
/// a name can go unasked for a while.) Left out: faults with a store-wide
/// fault in the time the names should have been taken in (nobody can take
/// anything then) or, on etcd, a failover shortly before it (a new leader
/// renews every lease), and names never taken when the run ended before
/// that time was up.
async fn unavailability(
    client: &Client,
    s: &str,
    store: StoreKind,
    faults: &Faults,
) -> Result<Vec<Unavailable>, String> {
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
                        bool_or(taken.at IS NULL),
                        bool_or(EXISTS (
                            SELECT 1 FROM \"{s}\".attempts a
                            WHERE a.name = i.name AND a.mode = i.mode AND a.worker <> i.worker
                              AND a.outcome = 'busy'
                              AND a.finished > f.started + $1::float8 * interval '1 second'
                              AND a.finished <= coalesce(taken.at, 'infinity')))
                 FROM \"{s}\".faults f
                 JOIN \"{s}\".intervals i ON (i.worker = f.target OR i.worker LIKE f.target || '.%')
                   AND i.started <= f.started
                   AND coalesce(i.ended, 'infinity') > f.started
                 CROSS JOIN LATERAL (
                    SELECT min(n.started) AS at FROM \"{s}\".intervals n
                    WHERE n.name = i.name AND n.mode = i.mode AND n.started > f.started) taken
                 WHERE f.kind IN ('kill', 'pause', 'pause-write', 'partition')
                 GROUP BY f.id, f.kind, f.target, f.started"
            ),
            &[&limit],
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
            let refused: Option<bool> = row.get(5);
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
            Some(Unavailable {
                kind,
                target,
                took,
                stuck: refused == Some(true),
            })
        })
        .collect())
}

/// A holder lost to a fault, and what became of the names it held.
#[derive(Clone, Debug)]
pub struct Unavailable {
    /// The fault.
    pub kind: FaultKind,
    /// Its target.
    pub target: String,
    /// How long until a new section took the last of its names; `None`:
    /// one was never taken again.
    pub took: Option<Duration>,
    /// Whether one of them was refused to another worker after its lease
    /// must have ended.
    pub stuck: bool,
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
/// meanwhile), when any worker was frozen, when a store-wide fault was on,
/// or when a third worker's call on the lock failed in it (a lease the
/// store granted it, whose answer came late or never, holds the lock with
/// no section to show for it).
async fn slept_past_release(
    client: &Client,
    s: &str,
    faults: &Faults,
) -> Result<(Vec<Slept>, i64), String> {
    let rows = client
        .query(
            &format!(
                "WITH rel AS (
                    SELECT i.name, i.mode, i.worker, i.ended AS released,
                           (SELECT min(n.started) FROM \"{s}\".intervals n
                            WHERE n.name = i.name AND n.mode = i.mode AND n.started > i.ended) AS next
                    FROM \"{s}\".intervals i
                    WHERE i.ended IS NOT NULL AND NOT i.cancelled
                      -- A section that ended while another of the lock ran
                      -- (an overlap a fault explained) left it held.
                      AND NOT EXISTS (
                        SELECT 1 FROM \"{s}\".intervals o
                        WHERE o.name = i.name AND o.mode = i.mode AND o.id <> i.id
                          AND o.started < i.ended AND coalesce(o.ended, 'infinity') > i.ended)),
                 waits AS (
                    SELECT a.name, a.mode, a.worker, a.wait_started,
                           coalesce((SELECT n.started FROM \"{s}\".intervals n WHERE n.id = a.interval_id),
                                    a.finished) AS served
                    FROM \"{s}\".attempts a)
                 SELECT r.worker, w.worker, extract(epoch FROM r.released)::float8,
                        extract(epoch FROM coalesce(r.next, clock_timestamp()))::float8,
                        r.name || ' ' || r.mode,
                        extract(epoch FROM (SELECT min(wait_started) FROM \"{s}\".attempts))::float8,
                        extract(epoch FROM w.wait_started)::float8, extract(epoch FROM w.served)::float8,
                        failed.starts, failed.ends
                 FROM rel r JOIN waits w ON w.name = r.name AND w.mode = r.mode
                   AND w.worker <> r.worker AND w.wait_started < coalesce(r.next, clock_timestamp())
                   AND w.served > r.released + $1::float8 * interval '1 second'
                 CROSS JOIN LATERAL (
                    SELECT coalesce(array_agg(extract(epoch FROM t.wait_started)::float8), '{{}}') AS starts,
                           coalesce(array_agg(extract(epoch FROM t.finished)::float8), '{{}}') AS ends
                    FROM \"{s}\".attempts t
                    WHERE t.name = r.name AND t.mode = r.mode
                      AND t.worker <> r.worker AND t.worker <> w.worker
                      AND t.outcome IN ('error', 'lost')
                      AND t.wait_started < coalesce(r.next, clock_timestamp())
                      AND t.finished > r.released - interval '10 seconds') failed
                 WHERE coalesce(r.next, clock_timestamp()) > r.released + $1::float8 * interval '1 second'
                 ORDER BY r.released"
            ),
            &[&WAKE_SLACK.as_secs_f64()],
        )
        .await
        .map_err(|e| format!("finding waiters that slept past a release: {e}"))?;
    let slack = WAKE_SLACK.as_secs_f64();
    let mut seen = std::collections::HashSet::new();
    let mut slept = Vec::new();
    for row in &rows {
        let (holder, waiter): (String, String) = (row.get(0), row.get(1));
        let (released, next): (f64, f64) = (row.get(2), row.get(3));
        let (waited_from, served): (f64, f64) = (row.get(6), row.get(7));
        // A third worker whose call on this lock failed meanwhile may have
        // held it unseen: granted by the store, its answer late or lost,
        // given back only once that call gave up.
        let (starts, ends): (Vec<f64>, Vec<f64>) = (row.get(8), row.get(9));
        let failed: Vec<(f64, f64)> = starts.into_iter().zip(ends).collect();
        let free = faults.free_from((&holder, &waiter), (released, next), &failed);
        // Slept: free (nothing excusing it any more) for over the slack,
        // with this worker waiting from before then until past the slack.
        if next - free <= slack || waited_from >= free || served <= free + slack {
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
            free_for: next - free,
            nearby: faults.near(released, 3.0),
        });
    }
    // The denominator: releases another worker was waiting through.
    let waited_on: i64 = client
        .query_one(
            &format!(
                "SELECT count(*) FROM \"{s}\".intervals i
                 WHERE i.ended IS NOT NULL AND NOT i.cancelled AND EXISTS (
                    SELECT 1 FROM \"{s}\".attempts a
                    WHERE a.name = i.name AND a.mode = i.mode AND a.worker <> i.worker
                      AND a.wait_started < i.ended AND a.finished > i.ended)"
            ),
            &[],
        )
        .await
        .map_err(|e| format!("counting releases waited on: {e}"))?
        .get(0);
    Ok((slept, waited_on))
}
