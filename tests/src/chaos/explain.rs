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

use super::{FaultKind, StoreKind, TTL};

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
    /// Whether it can take the lease of `lock` (`fenced:n0`).
    fn touches(&self, lock: &str) -> bool {
        self.names
            .as_ref()
            .is_none_or(|names| names.iter().any(|name| name == lock))
    }

    /// Whether it hits `worker` (a record's label): its own target, the
    /// same slot in another life (`w3#0`, `w3#1`), any task of a memory
    /// store's process, or the store.
    pub fn hits(&self, worker: &str) -> bool {
        self.target == "store" || self.target == "w" || slot_of(&self.target) == slot_of(worker)
    }
}

/// The slot of a worker label: `w3` of `w3#1`.
pub fn slot_of(label: &str) -> &str {
    label.split('#').next().unwrap_or(label)
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
}

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
                    let frozen_holder = !fault.kind.freezes() || fault.target == lost.worker;
                    let touched = fault.kind.freezes() || fault.touches(lock);
                    frozen_holder
                        && touched
                        && lost.requested < fault.ended
                        && other.started >= fault.started
                        && other.started <= fault.ended + lease
                })
            })
            .map(|fault| fault.kind)
            .min()
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

    /// Whether a release by `holder` may have gone unheard by `waiter`, or
    /// not happened, for a reason other than a lost wakeup, between `from`
    /// and `to`: any fault but a clock jump on either of them (a release
    /// that failed on a cut or held connection and is retried; a
    /// subscription cut and reconnecting with backoff; a wakeup held back
    /// by a delay; a holder killed between its section and its release), a
    /// freeze of anyone (a worker frozen between its acquire and its
    /// section holds the lock with no section open), or a store-wide fault.
    pub fn excuses_wait(&self, holder: &str, waiter: &str, from: f64, to: f64) -> bool {
        self.0.iter().any(|fault| {
            let relevant = fault.kind.store_wide()
                || fault.kind.freezes()
                || (fault.kind != FaultKind::Clock && (fault.hits(holder) || fault.hits(waiter)));
            relevant && fault.started <= to && fault.ended >= from
        })
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

    fn side(worker: &str, requested: f64, started: f64) -> Side<'_> {
        Side {
            worker,
            requested,
            started,
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
}
