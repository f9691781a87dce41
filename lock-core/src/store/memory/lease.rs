//! [`Lease`]: one lease as the memory store keeps it, a writer's or a reader's.

use tokio::time::Instant;

use super::token::StoredToken;
use crate::Holder;

/// One lease: its token, its end, and its fencing token.
pub(super) struct Lease {
    pub(super) token: StoredToken,
    pub(super) expires: Instant,
    /// The fencing token this lease was given, or 0 for none (tokens start
    /// at 1): shown by `holder` and `list`.
    pub(super) fence: u64,
}

impl Lease {
    #[inline]
    pub(super) fn live_at(&self, now: Instant) -> bool {
        self.expires > now
    }

    /// Who holds this lease, seen at `now`, as a reader's when `reader`.
    pub(super) fn holder_as(&self, now: Instant, reader: bool) -> Holder {
        let holder = self.holder(now);
        if reader { holder.as_reader() } else { holder }
    }

    pub(super) fn holder(&self, now: Instant) -> Holder {
        let holder = Holder::new(self.token.to_token(), self.expires - now);
        match self.fence {
            0 => holder,
            fence => holder.with_fence(fence),
        }
    }
}
