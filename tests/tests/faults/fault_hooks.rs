//! The harness's fault hooks on real servers: a Redis Cluster whose nodes
//! are killed, replaced by a promoted replica and brought back as the same
//! members, and an etcd cluster whose Raft leader is found and restarted.
//! A fault-injection run trusts these hooks to say what happened; if one
//! answered wrongly (the old port as the new primary, a restarted node that
//! is a stranger to its cluster) every finding built on it would be wrong.
//!
//! Time bounds are hang guards.

use std::time::{Duration, Instant};

use lock_core::{LockManager, RedisStore};
use lock_tests::etcd::{self, EtcdCluster};
use lock_tests::harness::{self, RedisCluster, command};

/// A failover takes a few seconds with `--cluster-node-timeout 2000`; this
/// only keeps a broken one from hanging the suite.
const FAILOVER_GUARD: Duration = Duration::from_secs(30);

fn blocking<T>(step: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(step)
}

/// The value of `field` in an `INFO` reply.
fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .map(|value| value.trim().to_owned())
}

/// The port in a `redis://127.0.0.1:<port>` URL.
fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .and_then(|port| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

/// Asserts, once, that the node on `port` reports `role:slave` of
/// `primary` with its link up: `restart_node` promises to have waited for
/// that, so it is not waited for here.
fn replicates(port: u16, primary: u16) {
    let info = command(port, &["INFO", "replication"])
        .unwrap_or_else(|e| panic!("INFO replication on {port}: {e}"));
    let role = info_field(&info, "role");
    let master = info_field(&info, "master_port");
    let link = info_field(&info, "master_link_status");
    assert!(
        role.as_deref() == Some("slave")
            && master == Some(primary.to_string())
            && link.as_deref() == Some("up"),
        "node {port} replicates {primary} once restart_node returns: role {role:?}, \
         master_port {master:?}, link {link:?}"
    );
}

/// A killed primary's replica takes over, the killed node comes back as
/// that replica's replica (the same member, from its `nodes.conf`), a
/// killed replica comes back as a replica of its primary, and locks work
/// on every shard afterwards. Dropping the cluster leaves no node
/// directory behind, though the kills did not remove them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_primary_is_replaced_by_its_replica_and_rejoins_as_its_replica() {
    if !harness::redis_server_installed() {
        harness::unavailable::<()>(
            "the Redis Cluster fault hooks test",
            "redis-server is not on PATH",
        );
        return;
    }
    let mut cluster = blocking(|| RedisCluster::start_kept(3, 1))
        .expect("a kept cluster of three primaries with a replica each");
    let urls = cluster.urls();
    let ports: Vec<u16> = urls.iter().map(|url| port_of(url)).collect();
    let primaries = blocking(|| cluster.primary_ports()).expect("the primaries");
    assert_eq!(
        primaries,
        ports[..3],
        "before any fault, the first three nodes are the primaries"
    );

    let old = primaries[0];
    let replicas = blocking(|| cluster.replica_ports(old)).expect("its replicas");
    assert_eq!(replicas.len(), 1, "one replica of {old}: {replicas:?}");
    blocking(|| cluster.kill_node(old)).expect("kill the primary");
    let killed = Instant::now();
    let new = blocking(|| cluster.wait_for_promotion(old, FAILOVER_GUARD))
        .expect("its replica takes over");
    eprintln!(
        "informational: {new} took over from {old} {:?} after the kill",
        killed.elapsed()
    );
    assert_eq!(
        new, replicas[0],
        "the promoted node is {old}'s former replica"
    );
    let primaries = blocking(|| cluster.primary_ports()).expect("the primaries");
    assert!(
        primaries.contains(&new) && !primaries.contains(&old) && primaries.len() == 3,
        "the running primaries follow the failover: {primaries:?}"
    );

    blocking(|| cluster.restart_node(old)).expect("restart the killed primary");
    blocking(|| replicates(old, new));
    let primaries = blocking(|| cluster.primary_ports()).expect("the primaries");
    assert!(
        primaries.contains(&new) && !primaries.contains(&old) && primaries.len() == 3,
        "the restarted node is not a primary: {primaries:?}"
    );

    // A replica killed and restarted comes back as a replica of its primary.
    let other = primaries
        .iter()
        .copied()
        .find(|port| *port != new)
        .expect("another primary");
    let replica = blocking(|| cluster.replica_ports(other)).expect("its replicas")[0];
    blocking(|| cluster.kill_node(replica)).expect("kill a replica");
    blocking(|| cluster.restart_node(replica)).expect("restart the replica");
    blocking(|| replicates(replica, other));

    // Every shard, the one that failed over included, takes a lock again.
    let seeds: Vec<&str> = urls.iter().map(String::as_str).collect();
    let locks = LockManager::new(
        RedisStore::cluster(&seeds)
            .await
            .expect("connect to the cluster after the faults"),
    )
    .with_prefix(format!("fault-hooks-{:08x}:", rand::random::<u32>()));
    for index in 0..24 {
        let lock = locks.lock(format!("job-{index}"), Duration::from_secs(30));
        let guard = lock
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("acquire job-{index} after the failover: {e}"))
            .unwrap_or_else(|| panic!("job-{index} is free"));
        assert!(
            lock.is_held().await.expect("read the lease back"),
            "job-{index} reads back as held"
        );
        guard.release().await.expect("release");
    }

    drop(locks);
    drop(cluster);
    let prefixes: Vec<String> = ports
        .iter()
        .map(|port| format!("lock-tests-redis-{}-{port}-", std::process::id()))
        .collect();
    let left: Vec<String> = std::fs::read_dir(std::env::temp_dir())
        .expect("list the temporary directory")
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| prefixes.iter().any(|prefix| name.starts_with(prefix)))
        .collect();
    assert!(
        left.is_empty(),
        "dropping the cluster removes its nodes' directories: {left:?}"
    );
}

/// The leader of a three-member etcd cluster is found, restarted with its
/// data, and a leader (the same one or another) is found again, with every
/// member healthy.
#[test]
fn the_etcd_leader_is_found_again_after_it_is_restarted() {
    let Some(mut cluster) = EtcdCluster::start_with_or_skip(3, &[]) else {
        return;
    };
    assert_eq!(cluster.member_count(), 3, "three members were started");
    let leader = cluster
        .leader_index()
        .expect("the leader of a fresh cluster");
    let (leader_id, _) = etcd::member_status(cluster.members[leader].port).expect("its status");
    for member in &cluster.members {
        let (_, named) = etcd::member_status(member.port).expect("a member's status");
        assert_eq!(
            named.as_deref(),
            Some(leader_id.as_str()),
            "the member on {} names m{leader} its leader",
            member.port
        );
    }

    cluster.restart(leader).expect("restart the leader");
    let again = cluster
        .wait_for_leader(FAILOVER_GUARD)
        .expect("a leader after the restart");
    assert!(again < cluster.member_count(), "a member's index: {again}");
    let deadline = Instant::now() + FAILOVER_GUARD;
    for member in &cluster.members {
        while let Err(e) = etcd::healthy(member.port) {
            assert!(
                Instant::now() < deadline,
                "the member on {} is healthy after the restart: {e}",
                member.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    eprintln!("informational: the leader was m{leader}, then m{again}");
}
