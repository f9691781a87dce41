//! [`Leader`]: who leads an election, as the store says.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::Holder;

/// Between a candidate's label and the time its term began, in the
/// readable part of its lease's token: `10.0.0.5:8080 since 1796571532858`.
const SINCE: &str = " since ";

/// The readable part of a candidate's token: its label, then when its term
/// began, in milliseconds since 1970 on its own clock.
pub(super) fn described(label: &str, since_ms: u128) -> String {
    format!("{label}{SINCE}{since_ms}")
}

/// Who leads an election: [`Election::leader`](crate::Election::leader),
/// and each item of [`Election::observe`](crate::Election::observe).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    label: String,
    term: u64,
    since: Option<SystemTime>,
    remaining: Duration,
}

impl Leader {
    /// The leader as `holder`, the holder of the election's lease, says:
    /// `None` for a holder that is not an election's leader (a reader; a
    /// lease without a fencing token, taken by a plain lock on the name).
    pub(crate) fn of(holder: &Holder) -> Option<Leader> {
        if holder.is_reader() {
            return None;
        }
        let term = holder.fence()?;
        let owner = holder.owner();
        let (label, since) = match owner.rsplit_once(SINCE) {
            Some((label, since)) => match since.parse::<u64>() {
                Ok(ms) => (label, UNIX_EPOCH.checked_add(Duration::from_millis(ms))),
                Err(_) => (owner, None),
            },
            None => (owner, None),
        };
        Some(Leader {
            label: label.to_owned(),
            term,
            since,
            remaining: holder.remaining_ttl(),
        })
    }

    /// The leader's label ([`Election::label`](crate::Election::label)):
    /// `host:pid` unless it set one.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// The leader's term: its fencing token, strictly greater than every
    /// earlier leader's.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// When this term began, by the leader's own wall clock (which may
    /// disagree with this machine's): for people, not for deciding
    /// anything. `None` for a lease taken by something other than an
    /// election.
    pub fn since(&self) -> Option<SystemTime> {
        self.since
    }

    /// How long the leader's lease had left when the store was read: the
    /// longest the others wait if it dies now (it renews every third of
    /// its TTL while it lives).
    pub fn remaining_ttl(&self) -> Duration {
        self.remaining
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(description: &str) -> Holder {
        let token = format!("{}@{description}", "0".repeat(32));
        Holder::new(token, Duration::from_secs(3))
    }

    #[test]
    fn a_leader_reads_its_label_and_start_from_the_token() {
        let leader =
            Leader::of(&holder(&described("10.0.0.5:8080", 1_796_571_532_858)).with_fence(7))
                .expect("a fenced writer leads");
        assert_eq!(leader.label(), "10.0.0.5:8080");
        assert_eq!(leader.term(), 7);
        assert_eq!(
            leader.since(),
            UNIX_EPOCH.checked_add(Duration::from_millis(1_796_571_532_858))
        );
        assert_eq!(leader.remaining_ttl(), Duration::from_secs(3));
    }

    #[test]
    fn a_label_holding_the_separator_keeps_it() {
        // Split at the last separator: a label may say "since" itself.
        let described = described("up since monday", 5);
        let leader = Leader::of(&holder(&described).with_fence(1)).expect("leads");
        assert_eq!(leader.label(), "up since monday");
    }

    #[test]
    fn a_lease_without_a_term_or_a_start_is_shown_as_it_is() {
        // A plain lock on the name has no term: nobody leads the election.
        assert_eq!(Leader::of(&holder("web-1:42")), None);
        // A term but no start (another kind of token): the whole owner.
        let leader = Leader::of(&holder("web-1:42").with_fence(3)).expect("leads");
        assert_eq!((leader.label(), leader.since()), ("web-1:42", None));
        // A reader never leads.
        assert_eq!(Leader::of(&holder("x").with_fence(3).as_reader()), None);
    }
}
