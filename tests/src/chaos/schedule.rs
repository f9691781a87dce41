//! The seeded fault schedule: which fault, when, on which worker.
//!
//! The schedule is a function of the seed, the run's length, the fault
//! kinds the store supports and the number of workers, nothing else: the
//! same `--seed` replays the same schedule. (Which worker *holds* a lock at
//! a fault's moment depends on timing; the schedule names the worker to
//! prefer, and the run takes the next holder after it.)

use std::time::Duration;

use super::{FaultKind, TTL};

/// A small deterministic generator (SplitMix64): the same seed gives the
/// same numbers on every machine and every version of every dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator started from `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound` > 0).
    pub fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// A duration in `low..=high`, to the millisecond.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let span = high.saturating_sub(low).as_millis() as u64;
        low + Duration::from_millis(self.below(span + 1))
    }
}

/// One fault of the schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    /// When it starts, from the start of the workload.
    pub at: Duration,
    /// What it is.
    pub kind: FaultKind,
    /// The worker to prefer (the run takes the first holder from here on).
    pub worker: usize,
    /// Of the first round, which injects every kind once: it waits for its
    /// target to be free of earlier faults. The others are left out when
    /// their target is still busy a while after their time.
    pub required: bool,
}

/// How long the workload runs before the first fault: every worker
/// connected and looping.
pub const WARM_UP: Duration = Duration::from_secs(2);

/// How long the run stays free of faults at its end, so that every lease a
/// fault stranded has run out and been taken and released cleanly before
/// the workers stop: what is left in the store then was left by a clean
/// shutdown.
pub const QUIET: Duration = Duration::from_secs(TTL.as_secs() + 3);

/// The schedule for a run of `duration` on a store that suffers `kinds`,
/// with `workers` workers: every kind once in a shuffled first round, then
/// random kinds, one every 2.5 s on average, all starting before the quiet
/// end.
pub fn plan(seed: u64, duration: Duration, kinds: &[FaultKind], workers: usize) -> Vec<Planned> {
    if kinds.is_empty() {
        return Vec::new();
    }
    let mut rng = Rng::new(seed);
    let active = duration.saturating_sub(WARM_UP + QUIET);
    let average = Duration::from_millis(2500);
    let count = kinds
        .len()
        .max((active.as_millis() / average.as_millis()) as usize);
    let mut first_round = kinds.to_vec();
    // Fisher-Yates.
    for i in (1..first_round.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        first_round.swap(i, j);
    }
    let step = active / count as u32;
    (0..count)
        .map(|i| {
            let kind = first_round
                .get(i)
                .copied()
                .unwrap_or_else(|| kinds[rng.below(kinds.len() as u64) as usize]);
            let jitter = rng.between(Duration::ZERO, step / 2);
            Planned {
                at: WARM_UP + step * i as u32 + jitter,
                kind,
                worker: rng.below(workers as u64) as usize,
                required: i < first_round.len(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const EVERY: &[FaultKind] = &FaultKind::ALL;

    // A seed printed by a failed run must replay the same faults.
    #[test]
    fn the_same_seed_gives_the_same_schedule() {
        let a = plan(42, Duration::from_secs(60), EVERY, 6);
        let b = plan(42, Duration::from_secs(60), EVERY, 6);
        assert_eq!(a, b, "same seed, same schedule");
        let c = plan(43, Duration::from_secs(60), EVERY, 6);
        assert_ne!(a, c, "another seed, another schedule");
    }

    // A short CI run must still show every fault the store can suffer.
    #[test]
    fn every_supported_kind_comes_once_even_in_a_short_run() {
        let kinds = [FaultKind::Pause, FaultKind::Kill, FaultKind::Clock];
        let faults = plan(7, Duration::from_secs(5), &kinds, 6);
        for kind in kinds {
            assert!(
                faults.iter().any(|fault| fault.kind == kind),
                "{kind} is scheduled: {faults:?}"
            );
        }
        assert!(
            faults.iter().all(|fault| kinds.contains(&fault.kind)),
            "nothing the store cannot suffer: {faults:?}"
        );
        let required: Vec<FaultKind> = faults
            .iter()
            .filter(|fault| fault.required)
            .map(|fault| fault.kind)
            .collect();
        assert_eq!(required.len(), kinds.len(), "one required fault per kind");
        assert!(
            kinds.iter().all(|kind| required.contains(kind)),
            "each kind required once: {required:?}"
        );
    }

    #[test]
    fn faults_start_in_order_before_the_quiet_end_and_name_real_workers() {
        let duration = Duration::from_secs(600);
        let faults = plan(1, duration, EVERY, 6);
        assert!(faults.len() >= 200, "one every 2.5 s: {}", faults.len());
        assert!(
            faults.windows(2).all(|pair| pair[0].at <= pair[1].at),
            "in order"
        );
        let last = faults.last().expect("faults");
        assert!(last.at < duration - QUIET, "before the quiet end: {last:?}");
        assert!(faults.iter().all(|fault| fault.worker < 6), "real workers");
    }

    #[test]
    fn a_store_with_no_faults_to_suffer_gets_an_empty_schedule() {
        assert!(plan(1, Duration::from_secs(60), &[], 6).is_empty());
    }
}
