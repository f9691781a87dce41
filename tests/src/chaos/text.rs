//! The report as text: each figure beside what it is counted out of, the
//! must-be-0 figures marked, and the result.

use std::fmt::Write as _;

use super::TTL;
use super::report::{Overlap, Report};

impl Report {
    /// The report as text.
    pub fn text(&self) -> String {
        let c = &self.context;
        let t = &self.totals;
        let mut out = String::new();
        let o = &mut out;
        let _ = writeln!(
            o,
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
            o,
            "replay: cargo run -p lock-tests --release --bin chaos -- --store {} --duration {}ms --seed {} --workers {} --names {}",
            c.store,
            c.duration.as_millis(),
            c.seed,
            c.workers,
            c.names
        );
        let _ = writeln!(
            o,
            "\noperations per worker (done / busy / lost lease / error)"
        );
        for (worker, [done, busy, lost, error]) in &self.per_worker {
            let _ = writeln!(o, "  {worker:<6} {done:>7} {busy:>7} {lost:>7} {error:>7}");
        }
        let _ = writeln!(o, "\nfaults injected");
        for (kind, count) in self.injected_by_kind() {
            let _ = writeln!(o, "  {:<12} {count}", kind.name());
        }
        for (kind, why) in &c.skipped {
            let _ = writeln!(o, "  {:<12} skipped: {why}", kind.name());
        }
        if c.faults_left_out > 0 {
            let _ = writeln!(
                o,
                "  ({} more left out: their target was still under an earlier fault)",
                c.faults_left_out
            );
        }
        for failure in &c.fault_failures {
            let _ = writeln!(o, "  FAILED       {failure}");
        }
        let _ = writeln!(o, "\nleases exercised");
        let _ = writeln!(
            o,
            "  sections                           {} fenced, {} plain",
            t.sections.0, t.sections.1
        );
        let _ = writeln!(
            o,
            "  renewals performed                 {}   (must be above 0)",
            t.renewals
        );
        let _ = writeln!(
            o,
            "  sections longer than the ttl       {}   (must be above 0: kept alive by renewal)",
            t.longer_than_ttl
        );
        let _ = writeln!(o, "\nfenced resource");
        if c.store.fences() {
            let _ = writeln!(
                o,
                "  writes accepted                    {}",
                self.fenced_accepted
            );
            let _ = writeln!(
                o,
                "  stale writes rejected by the fence {}   (must be above 0: the fence was tested)",
                self.fenced_rejected
            );
            let _ = writeln!(
                o,
                "  work cancelled on a lost lease     {}",
                self.fenced_cancelled
            );
            let _ = writeln!(
                o,
                "  stale writes accepted              {}   of {} accepted (must be 0)",
                self.stale_accepted, self.fenced_accepted
            );
            let _ = writeln!(
                o,
                "  lost updates                       {}   of {} accepted (must be 0)",
                self.lost_updates, self.fenced_accepted
            );
            let _ = writeln!(
                o,
                "  reads refused, fence went back     {}   of {} reads (must be 0)",
                self.fenced_refused, t.claims
            );
            let _ = writeln!(
                o,
                "  fences handed out twice            {}   (must be 0: each acquire's token is above every earlier one)",
                self.fences_twice.len()
            );
            for twice in self.fences_twice.iter().take(5) {
                let _ = writeln!(o, "    fence handed out twice: {twice}");
            }
            overlaps(o, "fenced", &self.fenced_overlaps, t.sections.0);
            for frozen in &self.frozen_writes {
                let _ = writeln!(o, "    frozen before its write: {frozen}");
            }
        } else {
            let _ = writeln!(o, "  not run: {} issues no fencing tokens", c.store);
        }
        let _ = writeln!(o, "\nunfenced critical sections");
        overlaps(o, "plain", &self.plain_overlaps, t.sections.1);
        let _ = writeln!(
            o,
            "  lost updates on the plain counter  {}   of {} writes (what the overlaps cost)",
            self.plain_lost_updates, t.plain_writes
        );
        let _ = writeln!(o, "\nleases, waiters and progress");
        let left = &c.leases_left;
        let _ = writeln!(
            o,
            "  leases left after the clean stop   {}   (must be 0; {} held at or after the stop looked for, then every name; workers stopped within {:.2} s)",
            left.count(),
            left.reported,
            left.stopped_in.as_secs_f64()
        );
        for name in &left.names {
            let _ = writeln!(o, "    left: {name}");
        }
        for unclean in &left.unclean {
            let _ = writeln!(o, "  worker did not stop cleanly: {unclean}");
        }
        let longest = self.unavailable.iter().filter_map(|lost| lost.took).max();
        let _ = writeln!(
            o,
            "  longest a name stayed untaken after its holder was lost: {} against a ttl of {:?} ({} faults measured; stuck, refused to another past the lease: {}, must be 0)",
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
            o,
            "  waiters that slept past a release  {}   of {} releases waited on {wake}",
            self.slept_past_release.len(),
            t.releases_waited_on
        );
        for slept in &self.slept_past_release {
            let _ = writeln!(
                o,
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
        let _ = writeln!(
            o,
            "  stalled workers                    {}   of {} (must be 0: a fault-free stretch of {:?} with no call finished and no body begun)",
            self.stalls.len(),
            c.workers_expected.len(),
            TTL * 3
        );
        let _ = writeln!(
            o,
            "  waiting calls that polled the store {}   (must be 0; the most acquire attempts of a call: {}, and per second: {:.1})",
            self.polled.calls.len(),
            self.polled.most,
            self.polled.most_per_second
        );
        for call in self.polled.calls.iter().take(5) {
            let _ = writeln!(o, "    polled: {call}");
        }
        let _ = writeln!(
            o,
            "  calls that gave up early           {}   (must be 0: a busy answer before the call's wait was out)",
            self.gave_up_early.len()
        );
        for call in self.gave_up_early.iter().take(5) {
            let _ = writeln!(o, "    gave up early: {call}");
        }
        for stall in &self.stalls {
            let _ = writeln!(
                o,
                "    {} made no progress for {:.1} s from {:.1} s",
                stall.worker, stall.length, stall.from
            );
        }
        if !self.errors.is_empty() {
            let _ = writeln!(
                o,
                "\nerrors seen by the workers (during faults), most frequent first"
            );
            for (message, count) in &self.errors {
                let _ = writeln!(o, "  {count:>6}  {message}");
            }
        }
        let violations = self.violations();
        if violations.is_empty() {
            let _ = writeln!(
                o,
                "\nresult: every must-be-0 figure is 0, and the leases were exercised"
            );
        } else {
            let _ = writeln!(o, "\nresult: FAILED");
            for violation in violations {
                let _ = writeln!(o, "  {violation}");
            }
        }
        out
    }
}

/// The overlaps of one mode, by cause, out of `sections`.
fn overlaps(o: &mut String, mode: &str, list: &[Overlap], sections: i64) {
    let longest = list.iter().map(|o| o.length).max().unwrap_or_default();
    let unexplained = list.iter().filter(|o| o.cause.is_none()).count();
    let _ = writeln!(
        o,
        "  overlapping {mode} sections{:>w$}{}   of {sections} sections (longest {longest:?}); unexplained {unexplained} (must be 0)",
        "",
        list.len(),
        w = 13usize.saturating_sub(mode.len())
    );
    for (cause, count) in Report::overlaps_by_cause(list) {
        let _ = writeln!(o, "    caused by {cause:<24} {count}");
    }
    for overlap in list.iter().filter(|o| o.cause.is_none()).take(5) {
        let _ = writeln!(
            o,
            "    UNEXPLAINED {}: {} and {}, {:?} together",
            overlap.lock, overlap.holders.0, overlap.holders.1, overlap.length
        );
    }
}
