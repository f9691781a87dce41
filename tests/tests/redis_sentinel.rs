//! Redis failover through Sentinel: what a lease survives when the primary
//! dies, with and without `RedisConfig::replica_acks`.
//!
//! Every test starts a group of its own (one primary, one replica, three
//! sentinels; `lock_tests::sentinel`) and kills nodes with `SIGKILL`.

use std::time::{Duration, Instant};

use lock_tests::sentinel::Sentinels;

/// Hang guard for one failover: the sentinels call the primary down after
/// 500 ms and elect a leader within a second or two; an election that
/// splits is tried again after 4 s.
const FAILOVER_GUARD: Duration = Duration::from_secs(30);

/// Hang guard for bringing a node back and the group settling.
const SETTLE_GUARD: Duration = Duration::from_secs(30);

/// The harness the other tests stand on: a killed primary is replaced by
/// its replica, the killed node comes back as the new primary's replica,
/// and a second failover moves the primary back, so rounds can repeat.
/// Without it a failover test could "pass" on a group that never failed
/// over.
#[test]
fn the_harness_sees_a_failover_and_the_killed_node_rejoins_as_a_replica() {
    let Some(mut group) = Sentinels::start() else {
        return;
    };
    let first = group
        .primary_port()
        .expect("the sentinels report a primary");
    let replica = group.replica_port().expect("a replica");
    assert_eq!(
        group.role(replica).expect("ROLE"),
        "slave",
        "the second node starts as a replica"
    );
    group
        .data_command(first, &["SET", "written-before", "1"])
        .expect("SET");
    group
        .data_command(first, &["WAIT", "1", "1000"])
        .expect("WAIT");

    let started = Instant::now();
    let killed = group.kill_primary().expect("kill");
    assert_eq!(killed, first, "the primary was the one killed");
    let second = group
        .wait_for_failover(killed, FAILOVER_GUARD)
        .expect("a failover");
    let took = started.elapsed();
    assert_eq!(second, replica, "the replica was promoted");
    assert_eq!(
        group.role(second).expect("ROLE"),
        "master",
        "the promoted node answers as a master"
    );
    assert_eq!(
        group
            .data_command(second, &["GET", "written-before"])
            .expect("GET"),
        "1",
        "the promoted node has what was replicated before the kill"
    );

    group
        .bring_back(killed, SETTLE_GUARD)
        .expect("the killed node rejoins");
    assert_eq!(
        group.role(killed).expect("ROLE"),
        "slave",
        "the killed node came back as a replica"
    );
    assert_eq!(
        group.primary_port().expect("primary"),
        second,
        "bringing a node back does not move the primary"
    );

    // A second round on the same group: the roles trade back.
    let again = group.kill_primary().expect("kill");
    let third = group
        .wait_for_failover(again, FAILOVER_GUARD)
        .expect("a second failover");
    assert_eq!(third, first, "the primary moved back to the first node");
    group
        .bring_back(again, SETTLE_GUARD)
        .expect("the node killed second rejoins");
    eprintln!(
        "harness: a failover took {took:.2?} from SIGKILL to a promoted primary the sentinels report"
    );
}
