//! The fault harness behind `cargo run -p lock-tests --release --bin chaos`:
//! the lease promises measured under the failures lock users suffer.
//!
//! # The run
//!
//! ```text
//! chaos --store redis --duration 60s --seed 7
//!   ├─ starts the store (its own servers on free ports) and a schema of its
//!   │  own in PostgreSQL for the shared resource
//!   ├─ starts W worker processes (this binary, `chaos worker`), each behind
//!   │  TCP proxies of its own to the store where the store allows it
//!   ├─ plays the seeded fault schedule while they work
//!   ├─ stops the workers cleanly, then counts the leases left in the store
//!   └─ reads what the workers recorded and prints the report
//! ```
//!
//! # The workload
//!
//! Each worker loops: it picks one of a few names at random and takes, at
//! random, the name's fenced lock (a `#[locked(..., fenced, renew,
//! on_lost = "cancel")]` function) or its plain lock; one call in three
//! works one to two TTLs, its lease kept alive by renewal (the plain lock
//! through `Lock::renew().run(...)`), the others 20 to 80 ms (the plain
//! lock through `acquire`, work, `release`). See [`worker`]. Under the lock
//! it does a read-modify-write on a shared resource in PostgreSQL:
//!
//! - **fenced**: a row per name that keeps the highest fencing token it has
//!   seen and refuses any access with a lower one, the read included (the
//!   standard fencing check, applied to the whole read-modify-write). Every
//!   access bumps the row's version, so the analysis knows, without any
//!   clock, whether another holder read the row between a holder's read and
//!   its accepted write: a *stale write accepted*, which loses an update.
//! - **plain**: an unfenced counter per name.
//!
//! Every section's interval is recorded on PostgreSQL's clock, the one
//! clock every process shares, with when its lease's acquire was sent. Two
//! sections of one lock at once, fenced or plain, are the overlap the lease
//! model allows only when a fault explains them (a holder frozen past its
//! TTL, a store that forgot the lease); see [`explain`]. Any other overlap
//! fails the run: on a fenced lock it is a double grant the fence merely
//! made harmless.
//!
//! # The faults
//!
//! See [`FaultKind`]: each store suffers the kinds that mean something for
//! it; the others are skipped and listed with the reason. The schedule comes
//! from the seed alone (printed; `--seed` replays it): the first round
//! injects every kind once in a shuffled order, the rest are random.
//!
//! # What fails a run
//!
//! A figure that must be 0 and is not (see [`report`]), and a figure that
//! is 0 because nothing was tested: no renewal made, no section outlived
//! its TTL, no stale write reached the fence. Every must-be-0 figure is
//! printed beside what it is counted out of.

pub mod counted;
pub mod explain;
pub mod faults;
pub mod report;
pub mod resource;
pub mod run;
pub mod schedule;
mod text;
pub mod topology;
pub mod worker;

use std::fmt;
use std::time::Duration;

/// Every lease's TTL, as the fenced function declares it (`ttl = "3s"`);
/// the plain locks take theirs from that declaration.
pub const TTL: Duration = Duration::from_secs(3);

/// How long one call waits for its lock before giving up with `None`.
pub const WAIT: Duration = Duration::from_secs(2);

/// How long one plain call in three waits: two TTLs, longer than any
/// holder's lease, so that a waiter that missed a release is still waiting
/// while the lock stands free.
pub const LONG_WAIT: Duration = Duration::from_secs(2 * TTL.as_secs());

/// How long a long section works: between one and two TTLs, so that its
/// lease lives only by renewal.
pub const LONG_WORK: (Duration, Duration) = (TTL, Duration::from_secs(2 * TTL.as_secs()));

/// How long a short section works.
pub const SHORT_WORK: (Duration, Duration) = (Duration::from_millis(20), Duration::from_millis(80));

/// How long a call may wait for the store's answer on the workers that
/// wait long (every other slot): two TTLs, so that an answer arriving after
/// the lease it grants has ended still arrives (with the stores' default of
/// 3 s, the TTL here, such an answer is cut off by the timeout first). The
/// other workers keep the stores' defaults.
pub const LONG_TIMEOUT: Duration = Duration::from_secs(2 * TTL.as_secs());

/// How long a late reply is held back: past the lease it answers.
pub const LATE_BY: Duration = Duration::from_millis(TTL.as_millis() as u64 + 500);

/// How long after a release a waiter may take to be served before it
/// counts as having slept past the release.
pub const WAKE_SLACK: Duration = Duration::from_secs(1);

/// How long past its TTL a name may stay unavailable after its holder died
/// before it counts as stuck: a waiter wakes at the holder's expiry, plus
/// jitter and a round trip.
pub const STUCK_SLACK: Duration = Duration::from_secs(2);

/// The key prefix of every lock the harness takes.
pub const PREFIX: &str = "chaos:";

/// The stores the harness runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// The in-process store: one worker process, its workers as tasks.
    Memory,
    /// One `redis-server`.
    Redis,
    /// Three primaries, each with a replica.
    RedisCluster,
    /// A primary, a replica and three sentinels, with replica-acknowledged
    /// lease writes.
    RedisSentinel,
    /// One `memcached`.
    Memcached,
    /// The machine's PostgreSQL, in a schema of the run's own.
    Postgres,
    /// Three etcd members.
    Etcd,
}

impl StoreKind {
    /// Every store, in the order the table of `docs/reliability.md` lists them.
    pub const ALL: [StoreKind; 7] = [
        StoreKind::Memory,
        StoreKind::Redis,
        StoreKind::RedisCluster,
        StoreKind::RedisSentinel,
        StoreKind::Memcached,
        StoreKind::Postgres,
        StoreKind::Etcd,
    ];

    /// The name `--store` takes.
    pub fn name(self) -> &'static str {
        match self {
            StoreKind::Memory => "memory",
            StoreKind::Redis => "redis",
            StoreKind::RedisCluster => "redis-cluster",
            StoreKind::RedisSentinel => "redis-sentinel",
            StoreKind::Memcached => "memcached",
            StoreKind::Postgres => "postgres",
            StoreKind::Etcd => "etcd",
        }
    }

    /// The store named `name`, or an error listing the names.
    pub fn parse(name: &str) -> Result<StoreKind, String> {
        StoreKind::ALL
            .into_iter()
            .find(|kind| kind.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = StoreKind::ALL.iter().map(|kind| kind.name()).collect();
                format!("unknown store {name:?}: use one of {}", names.join(", "))
            })
    }

    /// Whether the store issues fencing tokens (memcached cannot: its items
    /// can be evicted, counters included).
    pub fn fences(self) -> bool {
        self != StoreKind::Memcached
    }

    /// The longest a lease of `ttl` can last in the store: memcached keeps
    /// whole seconds and adds one (its docs), the others keep `ttl`.
    pub fn longest_lease(self, ttl: Duration) -> Duration {
        if self == StoreKind::Memcached {
            Duration::from_secs(ttl.as_secs() + 2)
        } else {
            ttl
        }
    }

    /// Whether `fault` may make two holders' critical sections overlap on
    /// this store: the overlap the lease model allows. A holder frozen past
    /// its TTL, anywhere; a store that forgets leases: Redis or memcached
    /// restarted empty, a cluster primary restarted empty or failed over
    /// (its writes are not acknowledged by its replica); a server whose
    /// lease expiry reads its wall clock, when that clock jumps forward
    /// (Redis, whatever the topology). Not a Sentinel group's replica
    /// restart or failover (lease writes wait for the replica), an etcd
    /// member restart or leader change (consensus), or PostgreSQL's
    /// connections ending (leases are rows); not memcached's clock (its
    /// expiry runs on the monotonic clock); not a delay, a late reply, a
    /// cut connection, a partition, a kill or a worker's clock jump
    /// anywhere.
    pub fn loses_leases_to(self, fault: FaultKind) -> bool {
        match fault {
            FaultKind::Pause | FaultKind::PauseWrite => true,
            FaultKind::Restart => matches!(
                self,
                StoreKind::Redis | StoreKind::Memcached | StoreKind::RedisCluster
            ),
            FaultKind::Failover => self == StoreKind::RedisCluster,
            FaultKind::ServerClock => matches!(
                self,
                StoreKind::Redis | StoreKind::RedisCluster | StoreKind::RedisSentinel
            ),
            _ => false,
        }
    }

    /// Whether a waiter in one process is woken by a release in another.
    /// Memcached has no notifications: a waiter elsewhere sleeps until the
    /// holder's TTL or its own deadline.
    pub fn wakes_across_processes(self) -> bool {
        self != StoreKind::Memcached
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The faults the harness injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// `SIGSTOP` of a holder for longer than its TTL, then `SIGCONT`: a GC
    /// pause, a stopped VM, a blocked thread.
    Pause,
    /// A fenced holder frozen just before its write (the fencing check of
    /// the lease already behind it), past its TTL and until another holder
    /// has claimed the resource, then resumed: its write goes out stale.
    /// What fencing tokens exist for.
    PauseWrite,
    /// `SIGKILL` of a holder; a fresh worker takes its place.
    Kill,
    /// Every reply from the store to one worker held back a while: a slow
    /// link or server.
    Delay,
    /// Every reply from the store to one worker held back longer than a
    /// TTL, its requests going through: a store's answer arriving after
    /// the lease it grants has ended.
    Late,
    /// One worker's connections to the store cut again and again: a flaky
    /// link, a load balancer dropping connections.
    Drop,
    /// One worker's traffic to the store stopped (held, not lost) for
    /// longer than a TTL: a partition.
    Partition,
    /// The store's server (or one of them) killed and started again.
    Restart,
    /// The primary or leader killed, so that another takes over.
    Failover,
    /// One worker's wall clock moved hours forward, then back (libfaketime).
    Clock,
    /// The store's servers' wall clock moved forward past a TTL, then back:
    /// a server whose clock is stepped (NTP after a suspend, an operator).
    ServerClock,
}

impl FaultKind {
    /// Every kind, in the report's order.
    pub const ALL: [FaultKind; 11] = [
        FaultKind::Pause,
        FaultKind::PauseWrite,
        FaultKind::Kill,
        FaultKind::Delay,
        FaultKind::Late,
        FaultKind::Drop,
        FaultKind::Partition,
        FaultKind::Restart,
        FaultKind::Failover,
        FaultKind::Clock,
        FaultKind::ServerClock,
    ];

    /// The kind's name in the report.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::PauseWrite => "pause-write",
            FaultKind::Kill => "kill",
            FaultKind::Delay => "delay",
            FaultKind::Late => "late",
            FaultKind::Drop => "drop",
            FaultKind::Partition => "partition",
            FaultKind::Restart => "restart",
            FaultKind::Failover => "failover",
            FaultKind::Clock => "clock",
            FaultKind::ServerClock => "server-clock",
        }
    }

    /// The kind named `name`.
    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// Whether the fault hits the store rather than one worker.
    pub fn store_wide(self) -> bool {
        matches!(
            self,
            FaultKind::Restart | FaultKind::Failover | FaultKind::ServerClock
        )
    }

    /// Whether the fault is on one worker's traffic to the store.
    pub fn network(self) -> bool {
        matches!(
            self,
            FaultKind::Delay | FaultKind::Late | FaultKind::Drop | FaultKind::Partition
        )
    }

    /// Whether the fault freezes its target worker, so that a lease it
    /// held can run out under it.
    pub fn freezes(self) -> bool {
        matches!(self, FaultKind::Pause | FaultKind::PauseWrite)
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Parses `"60s"`, `"10m"`, `"1500ms"` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration: write it like 60s, 10m or 1500ms"))?;
    let seconds = |n: u64| Duration::from_secs(n);
    match unit {
        "" | "s" => Ok(seconds(number)),
        "ms" => Ok(Duration::from_millis(number)),
        "m" => number
            .checked_mul(60)
            .map(seconds)
            .ok_or_else(|| format!("{text:?} is too long")),
        "h" => number
            .checked_mul(3600)
            .map(seconds)
            .ok_or_else(|| format!("{text:?} is too long")),
        _ => Err(format!(
            "{text:?}: unknown unit {unit:?}; write it like 60s, 10m or 1500ms"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_in_the_units_the_command_line_uses() {
        assert_eq!(parse_duration("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("20"), Ok(Duration::from_secs(20)));
        assert!(parse_duration("ten").is_err(), "not a number");
        assert!(parse_duration("5d").is_err(), "unknown unit");
    }

    #[test]
    fn every_store_and_fault_name_reads_back() {
        for kind in StoreKind::ALL {
            assert_eq!(StoreKind::parse(kind.name()), Ok(kind));
        }
        for kind in FaultKind::ALL {
            assert_eq!(FaultKind::parse(kind.name()), Some(kind));
        }
        let unknown = StoreKind::parse("mysql").expect_err("no such store");
        assert!(
            unknown.contains("redis-sentinel"),
            "lists the names: {unknown}"
        );
    }
}
