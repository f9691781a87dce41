//! What a fault can explain: the rules the report matches overlaps,
//! slow wakeups and stalled workers against, on the server's clock
//! (seconds since the epoch).
//!
//! An excuse names a cause that could have produced what it excuses:
//!
//! - a holder frozen past its TTL (a pause, or a pause before a write)
//!   explains an overlap with its own section when its lease was asked
//!   for before the freeze ended and the other section began after the
//!   freeze began, within a TTL of its end (never a section whose acquire
//!   was sent after the pause ended);
//! - a store that forgets leases (see [`StoreKind::loses_leases_to`])
//!   explains an overlap of a name the fault touched (a cluster's restart
//!   or failover touches the names of one shard) when one section's lease
//!   was asked for before the fault ended and the other began between the
//!   fault's start and a TTL after its end;
//! - nothing else explains an overlap.

use tokio_postgres::Client;

use super::{FaultKind, StoreKind, TTL, WAKE_SLACK};

/// How soon after the lock is free a cause must begin to keep it from
/// being heard free: within the slack a waiter has anyway.
const WAKE_REACH: f64 = WAKE_SLACK.as_secs_f64();

/// One recorded fault.
#[derive(Clone, Debug)]
pub struct Fault {
    /// Its kind.
    pub kind: FaultKind,
    /// The worker (`w3#0`, or a memory store's task `w3`; `w` is the memory
    /// store's whole process) or `store`.
    pub target: String,
    /// When it began.
    pub started: f64,
    /// When it ended (when it began, if it never said).
    pub ended: f64,
    /// The lock names (`fenced:n0`) whose leases it can take; `None`:
    /// every name.
    pub names: Option<Vec<String>>,
}

impl Fault {
    /// Until when the fault can make the store forget a lease: its end;
    /// for a server clock jump, the jump itself (the fault's start; the
    /// clock is moved as soon as the fault is recorded). Leases set while
    /// the clock is ahead last longer once it comes back, and the rest of
    /// the fault waits for the real time to catch up: neither can cut a
    /// lease short.
    pub fn forgets_until(&self) -> f64 {
        match self.kind {
            FaultKind::ServerClock => self.started + JUMP_SLACK,
            _ => self.ended,
        }
    }

    /// Whether it can take the lease of `lock` (`fenced:n0`).
    fn touches(&self, lock: &str) -> bool {
        self.names
            .as_ref()
            .is_none_or(|names| names.iter().any(|name| name == lock))
    }

    /// Whether it hits `worker` (a record's label, or a [`worker_key`]):
    /// the store, a whole process (`w3#0`: every task of slot 3, in any
    /// life; `w`: the memory store's one process), or one task (`w3#0.1`,
    /// or a memory store's `w.1`).
    pub fn hits(&self, worker: &str) -> bool {
        if self.target == "store" {
            return true;
        }
        let (slot, task) = parts(&self.target);
        let (its_slot, its_task) = parts(worker);
        slot == its_slot && (task.is_none() || task == its_task)
    }
}

/// A label's slot and task: `w3#1.0` is slot `w3`, task `0` (of its second
/// life); `w3#1` is the whole of slot `w3`; a memory store's `w.2` is task
/// `2` of its one process `w`.
fn parts(label: &str) -> (&str, Option<&str>) {
    let (slot, rest) = match label.split_once('#') {
        Some((slot, rest)) => (slot, rest),
        None => match label.split_once('.') {
            Some((slot, task)) => return (slot, Some(task)),
            None => return (label, None),
        },
    };
    (slot, rest.split_once('.').map(|(_, task)| task))
}

/// A worker as its progress is counted, whatever life it is in: `w3.1` for
/// `w3#0.1` and `w3#2.1`, `w3` for `w3#2`, `w.1` for the memory store's
/// `w.1`.
pub fn worker_key(label: &str) -> String {
    match parts(label) {
        (slot, Some(task)) => format!("{slot}.{task}"),
        (slot, None) => slot.to_owned(),
    }
}

/// One section of an overlapping pair.
#[derive(Clone, Copy, Debug)]
pub struct Side<'a> {
    /// Its worker.
    pub worker: &'a str,
    /// When the acquire that won its lease was sent.
    pub requested: f64,
    /// When the section began.
    pub started: f64,
    /// When it ended (a killed worker's: at the kill).
    pub ended: f64,
}

/// How long after a fault that took a holder's lease the holder may go on:
/// its next renewal (every third of the TTL) finds the lease gone, or, if
/// it was frozen, it looks at its lease's clock as it wakes; a second on
/// top for the round trip and the scheduler. A holder that goes on longer
/// ignored the loss, and its overlap is not the fault's.
pub const NOTICE: f64 = TTL.as_secs_f64() / 3.0 + 1.0;

/// The label of the late fault's rival's sections (see `faults::late`).
pub const RIVAL: &str = "rival";

/// How long after a server clock jump is recorded the servers' clock may
/// still be moving: it is moved as soon as the record is written.
pub const JUMP_SLACK: f64 = 0.5;

/// How long after a fault ends a waiter may still be deaf to a release: a
/// subscription cut by it is made again after a backoff (a second at
/// most), and a release it held back is retried.
pub const GRACE: f64 = 2.0;

/// The faults of a run.
#[derive(Clone, Debug, Default)]
pub struct Faults(pub Vec<Fault>);

impl Faults {
    /// Reads the run's faults from schema `s`.
    pub async fn read(client: &Client, s: &str) -> Result<Faults, String> {
        let rows = client
            .query(
                &format!(
                    "SELECT kind, target, extract(epoch FROM started)::float8,
                            extract(epoch FROM coalesce(ended, started))::float8, names
                     FROM \"{s}\".faults"
                ),
                &[],
            )
            .await
            .map_err(|e| format!("reading the faults: {e}"))?;
        Ok(Faults(
            rows.iter()
                .filter_map(|row| {
                    Some(Fault {
                        kind: FaultKind::parse(row.get::<_, &str>(0))?,
                        target: row.get(1),
                        started: row.get(2),
                        ended: row.get(3),
                        names: row.get(4),
                    })
                })
                .collect(),
        ))
    }

    /// The fault that explains two sections of `lock` (`fenced:n0`)
    /// running at once on `store` (see the [module docs](self)), or
    /// `None`.
    pub fn explaining(
        &self,
        store: StoreKind,
        lock: &str,
        a: Side<'_>,
        b: Side<'_>,
    ) -> Option<FaultKind> {
        let lease = store.longest_lease(TTL).as_secs_f64();
        self.0
            .iter()
            .filter(|fault| store.loses_leases_to(fault.kind))
            .filter(|fault| {
                [(a, b), (b, a)].into_iter().any(|(lost, other)| {
                    let frozen_holder = !fault.kind.freezes() || fault.hits(lost.worker);
                    let touched = fault.kind.freezes() || fault.touches(lock);
                    frozen_holder
                        && touched
                        && lost.requested < fault.forgets_until()
                        && lost.ended <= self.stop_by(lost, fault)
                        && other.started >= fault.started
                        && other.started <= fault.forgets_until() + lease
                })
            })
            .map(|fault| fault.kind)
            .min()
    }

    /// Until when, after `fault` took `lost`'s lease, its holder may go
    /// on: until its next renewal ([`NOTICE`]), or, when its own traffic to
    /// the store was held back or cut since the fault began (its renewals
    /// could not answer in time), until its lease's local deadline, a TTL
    /// after the last renewal that did. A holder frozen before that moment
    /// can know only once it runs again: a freeze of its worker begun by
    /// then moves the moment to a second after the freeze ended.
    fn stop_by(&self, lost: Side<'_>, fault: &Fault) -> f64 {
        let impaired = self.0.iter().any(|other| {
            (other.kind.network() || other.kind.freezes())
                && other.target != "store"
                && other.hits(lost.worker)
                && other.started <= lost.ended
                && other.ended >= fault.started
        });
        let mut by = fault.forgets_until()
            + if impaired {
                TTL.as_secs_f64() + 1.0
            } else {
                NOTICE
            };
        let mut freezes: Vec<&Fault> = self
            .0
            .iter()
            .filter(|other| {
                other.kind.freezes()
                    && other.target != "store"
                    && other.hits(lost.worker)
                    && other.ended >= fault.started
            })
            .collect();
        freezes.sort_by(|a, b| a.started.total_cmp(&b.started));
        for freeze in freezes {
            if freeze.started <= by {
                by = by.max(freeze.ended + 1.0);
            }
        }
        // The late fault's rival holds its name a TTL, renewing nothing:
        // it cannot notice a lease the store forgot, and stops when its TTL
        // is out.
        if lost.worker == RIVAL {
            by = by.max(lost.started + TTL.as_secs_f64() + 1.0);
        }
        by
    }

    /// The faults active within `margin` seconds of `at`, as `kind target`.
    pub fn near(&self, at: f64, margin: f64) -> Vec<String> {
        self.0
            .iter()
            .filter(|fault| fault.started <= at + margin && fault.ended >= at - margin)
            .map(|fault| format!("{} {}", fault.kind, fault.target))
            .collect()
    }

    /// Whether a failover was on between `from` and `to`.
    pub fn failover(&self, from: f64, to: f64) -> bool {
        self.0.iter().any(|fault| {
            fault.kind == FaultKind::Failover && fault.started <= to && fault.ended >= from
        })
    }

    /// Whether a store-wide fault was on between `from` and `to`: the
    /// store (a cluster: all of it) may refuse every name meanwhile.
    pub fn store_wide(&self, from: f64, to: f64) -> bool {
        self.0
            .iter()
            .any(|fault| fault.kind.store_wide() && fault.started <= to && fault.ended >= from)
    }

    /// When the lock released at `released` and next taken at `next` was
    /// truly free for `waiter`: the release, or the end (plus [`GRACE`]) of
    /// the last fault that could have kept it from being heard or the lock
    /// from being free meanwhile, whichever is later. Such a fault is any
    /// fault but a clock jump on the releasing or the waiting worker (a
    /// release retried over a cut connection, a subscription reconnecting
    /// with backoff, a wakeup held back by a delay), a freeze of anyone (a
    /// worker frozen between its acquire and its section holds the lock
    /// with no section open), a kill of anyone (a killed worker's lease
    /// lasts its TTL), a store-wide fault, or a third worker's call on the
    /// lock that failed (`failed`, as its start and end: a lease granted to
    /// it whose answer came late or never holds the lock until the call
    /// gives it back). Each excuses only until it is over.
    pub fn free_from(
        &self,
        (holder, waiter): (&str, &str),
        (released, next): (f64, f64),
        failed: &[(f64, f64)],
    ) -> f64 {
        let lease = TTL.as_secs_f64();
        let mut ends: Vec<(f64, f64)> = self
            .0
            .iter()
            .filter(|fault| {
                fault.kind.store_wide()
                    || fault.kind.freezes()
                    || fault.kind == FaultKind::Kill
                    || (fault.kind != FaultKind::Clock
                        && (fault.hits(holder) || fault.hits(waiter)))
            })
            .map(|fault| {
                let end = if fault.kind == FaultKind::Kill {
                    fault.started + lease
                } else {
                    fault.ended
                };
                (fault.started, end + GRACE)
            })
            .chain(failed.iter().map(|(from, to)| (*from, to + GRACE)))
            .collect();
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut free = released;
        for (started, over) in ends {
            // A cause begun before the lock could be heard free, and not
            // over by then, pushes that moment to its end.
            if started <= free.max(released) + WAKE_REACH && over > free && started < next {
                free = free.max(over);
            }
        }
        free
    }

    /// The windows in which `worker` may be unable to finish a call: the
    /// faults on it (but a wall clock jump, which must not stop a lock
    /// library) and the store-wide ones, merged and in order.
    pub fn outages(&self, worker: &str) -> Vec<(f64, f64)> {
        let mut windows: Vec<(f64, f64)> = self
            .0
            .iter()
            .filter(|fault| fault.kind != FaultKind::Clock && fault.hits(worker))
            .map(|fault| (fault.started, fault.ended))
            .collect();
        windows.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut merged: Vec<(f64, f64)> = Vec::new();
        for (from, to) in windows {
            match merged.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => merged.push((from, to)),
            }
        }
        merged
    }
}

/// The stretches of `(from, to)` with no fault on the worker (`outages`,
/// merged and in order) and no call finished (`finished`, in order) for
/// `at_least` seconds or more: each as `(start, length)`.
pub fn stalls(
    (from, to): (f64, f64),
    outages: &[(f64, f64)],
    finished: &[f64],
    at_least: f64,
) -> Vec<(f64, f64)> {
    let mut stalls = Vec::new();
    let mut quiet_since = from;
    let mut outages = outages.iter().peekable();
    let mut finished = finished.iter().copied().filter(|t| *t > from && *t <= to);
    let mut next_finished = finished.next();
    loop {
        let next_outage = outages.peek().copied();
        // Whichever comes first: a finished call, an outage, or the end.
        let (at, outage) = match (next_finished, next_outage) {
            (Some(t), Some(&(start, _))) if t < start => (t, None),
            (Some(t), None) => (t, None),
            (_, Some(&(start, end))) => (start, Some(end)),
            (None, None) => (to, None),
        };
        let at = at.min(to);
        if at - quiet_since >= at_least {
            stalls.push((quiet_since, at - quiet_since));
        }
        if at >= to {
            return stalls;
        }
        match outage {
            Some(end) => {
                outages.next();
                quiet_since = quiet_since.max(end);
                // Calls finished under the outage prove nothing either way.
                while next_finished.is_some_and(|t| t <= end) {
                    next_finished = finished.next();
                }
            }
            None => {
                quiet_since = quiet_since.max(at);
                next_finished = finished.next();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(kind: FaultKind, target: &str, started: f64, ended: f64) -> Fault {
        Fault {
            kind,
            target: target.to_owned(),
            started,
            ended,
            names: None,
        }
    }

    /// A section that lasted 100 ms.
    fn side(worker: &str, requested: f64, started: f64) -> Side<'_> {
        Side {
            worker,
            requested,
            started,
            ended: started + 0.1,
        }
    }

    // A pause explains the paused holder's overlap only: not a third
    // worker's, not one whose lease was asked for after the pause ended.
    #[test]
    fn a_pause_explains_only_its_own_holder_s_overlap_from_before_it_ended() {
        let faults = Faults(vec![fault(FaultKind::Pause, "w0#0", 10.0, 15.0)]);
        let redis = StoreKind::Redis;
        let explained = |a, b| faults.explaining(redis, "plain:n0", a, b);
        assert_eq!(
            explained(side("w0#0", 9.0, 9.1), side("w1#0", 12.5, 12.6)),
            Some(FaultKind::Pause),
            "the paused holder's section, overtaken during the pause"
        );
        assert_eq!(
            explained(side("w2#0", 9.0, 9.1), side("w1#0", 12.5, 12.6)),
            None,
            "neither section is the paused worker's"
        );
        assert_eq!(
            explained(side("w1#0", 16.0, 16.1), side("w0#0", 15.5, 16.05)),
            None,
            "the paused worker's lease was asked for after the pause ended"
        );
        assert_eq!(
            explained(side("w0#0", 9.0, 9.1), side("w1#0", 9.5, 9.6)),
            None,
            "the other section began before the pause: the lease was not lost yet"
        );
        assert_eq!(
            explained(side("w0#0", 9.0, 9.1), side("w1#0", 18.5, 18.6)),
            None,
            "the other section began more than a TTL after the pause ended"
        );
    }

    // A cluster primary's restart forgets the leases of its own shard
    // only.
    #[test]
    fn a_store_wide_fault_explains_only_the_names_it_touched() {
        let mut restart = fault(FaultKind::Restart, "store", 10.0, 10.5);
        restart.names = Some(vec!["plain:n1".to_owned()]);
        let faults = Faults(vec![restart]);
        let cluster = StoreKind::RedisCluster;
        let (a, b) = (side("w0#0", 9.0, 9.5), side("w1#0", 10.6, 10.7));
        assert_eq!(
            faults.explaining(cluster, "plain:n1", a, b),
            Some(FaultKind::Restart)
        );
        assert_eq!(faults.explaining(cluster, "plain:n0", a, b), None);
        assert_eq!(
            faults.explaining(StoreKind::RedisSentinel, "plain:n1", a, b),
            None,
            "a Sentinel group's replica restart loses no lease"
        );
    }

    #[test]
    fn a_stall_is_a_fault_free_stretch_without_a_finished_call() {
        // Calls at 1 and 2, then nothing until 15: a 13 s stall.
        assert_eq!(
            stalls((0.0, 20.0), &[], &[1.0, 2.0, 15.0, 19.0], 9.0),
            vec![(2.0, 13.0)]
        );
        // The same with a fault from 3 to 10: 2-3 and 10-15 are short.
        assert_eq!(
            stalls((0.0, 20.0), &[(3.0, 10.0)], &[1.0, 2.0, 15.0, 19.0], 9.0),
            Vec::<(f64, f64)>::new()
        );
        // Nothing at all after 2: stalled to the end.
        assert_eq!(
            stalls((0.0, 20.0), &[], &[1.0, 2.0], 9.0),
            vec![(2.0, 18.0)]
        );
        // A worker that never finished anything.
        assert_eq!(stalls((0.0, 20.0), &[], &[], 9.0), vec![(0.0, 20.0)]);
        // A call finished under an outage does not count: 6 to 20 and 20
        // to the end are stalls.
        assert_eq!(
            stalls((0.0, 30.0), &[(5.0, 6.0)], &[5.5, 20.0], 9.0),
            vec![(6.0, 14.0), (20.0, 10.0)]
        );
    }

    // A holder whose lease a fault took must stop once it could know: one
    // that went on past its next renewal ignored the loss, and the fault
    // does not explain the overlap.
    #[test]
    fn a_lost_holder_that_goes_on_past_its_next_renewal_is_not_excused() {
        let faults = Faults(vec![fault(FaultKind::Restart, "store", 10.0, 10.2)]);
        let redis = StoreKind::Redis;
        let other = side("w1#0", 10.3, 10.4);
        let mut lost = side("w0#0", 9.0, 9.1);
        lost.ended = 11.5;
        assert_eq!(
            faults.explaining(redis, "plain:n0", lost, other),
            Some(FaultKind::Restart),
            "stopped at its next renewal"
        );
        lost.ended = 13.0;
        assert_eq!(
            faults.explaining(redis, "plain:n0", lost, other),
            None,
            "went on 2.8 s after the restart"
        );
    }

    // A holder whose renewals were held back learns of the loss only at
    // its lease's deadline: a fault on its own traffic gives it a TTL.
    #[test]
    fn a_lost_holder_whose_renewals_were_held_back_may_go_on_to_its_deadline() {
        let restart = fault(FaultKind::Restart, "store", 10.0, 10.2);
        let late = fault(FaultKind::Late, "w0#0", 8.0, 20.0);
        let redis = StoreKind::Redis;
        let other = side("w1#0", 10.3, 10.4);
        let mut lost = side("w0#0.1", 9.0, 9.1);
        lost.ended = 12.5;
        assert_eq!(
            Faults(vec![restart.clone()]).explaining(redis, "plain:n0", lost, other),
            None,
            "renewals that could answer find the loss at the next one"
        );
        assert_eq!(
            Faults(vec![restart, late]).explaining(redis, "plain:n0", lost, other),
            Some(FaultKind::Restart),
            "late renewals: until the lease's deadline"
        );
    }

    // A fault excuses a waiter's sleep only until it is over, and a
    // cause that begins after the waiter should have been served excuses
    // nothing.
    #[test]
    fn a_fault_excuses_a_sleep_past_a_release_only_until_it_is_over() {
        let faults = Faults(vec![
            fault(FaultKind::Drop, "w1#0", 9.0, 11.0),
            fault(FaultKind::Pause, "w2#0", 20.0, 25.0),
        ]);
        let free = |released, next| faults.free_from(("w0#0", "w1#0"), (released, next), &[]);
        assert_eq!(free(10.0, 18.0), 13.0, "the drop's end and its grace");
        assert_eq!(free(14.0, 18.0), 14.0, "after the drop: nothing excuses");
        assert_eq!(
            free(19.5, 30.0),
            27.0,
            "a freeze of anyone begun within the slack"
        );
        assert_eq!(
            faults.free_from(("w0#0", "w1#0"), (14.0, 18.0), &[(13.5, 15.0)]),
            17.0,
            "a third worker's failed call on the lock"
        );
    }
}
