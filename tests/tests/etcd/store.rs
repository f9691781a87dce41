//! `EtcdStore` on real etcd: other processes, and what consensus is for: a
//! three-member cluster whose leader is killed while locks are held and
//! contended, and a minority that must not grant locks.
//!
//! Time bounds are hang guards.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lock_core::{EtcdConfig, EtcdStore, LockManager, OnLost};
use lock_tests::children;
use lock_tests::etcd::{self, EtcdCluster};
use tokio::time::Instant;

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

/// 4 processes x 8 tasks x 25 read-yield-write increments of a counter in a
/// file, each under one lock in etcd: any overlap loses an update. Waiters
/// in other processes are woken by their watch on the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_contending_for_one_lock_lose_no_update() {
    let Some(endpoints) = etcd::etcd_endpoints() else {
        return;
    };
    let total = children::file_increments_across_processes(
        env!("CARGO_BIN_EXE_lock-child"),
        &endpoints.join(","),
        &unique("contend"),
        &[],
        (4, 8, 25),
        30_000,
    );
    assert_eq!(total, 800, "no update lost across 4 processes");
}

/// 4 processes, each with 2 writers and 4 readers of one name in etcd:
/// writers mark a shared file as being written, update it and clear the
/// mark; readers must never see the mark. Every write lands, and no read
/// sees one under way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_never_see_a_write_under_way_across_4_processes() {
    let Some(endpoints) = etcd::etcd_endpoints() else {
        return;
    };
    let run = children::read_write_across_processes(
        env!("CARGO_BIN_EXE_lock-child"),
        &endpoints.join(","),
        &unique("read-write"),
        &[],
        (4, 2, 4, 25),
        30_000,
    );
    eprintln!("etcd, 4 processes: {run:?}");
    assert_eq!(run.torn, 0, "no read saw a write under way: {run:?}");
    assert_eq!(run.writes, 200, "every write ran: {run:?}");
    assert_eq!(run.reads, 400, "every read ran: {run:?}");
    assert_eq!(run.total, 200, "no update lost: {run:?}");
}

/// What one lock name saw during the failover run.
#[derive(Default)]
struct Seen {
    /// Holders inside the work right now (for this name).
    inside: AtomicUsize,
    /// Times two holders were inside at once.
    violations: AtomicUsize,
    /// Fencing tokens, in the order their holders ran.
    fences: Mutex<Vec<u64>>,
}

/// Leaves the work: counted whether it ends or is cancelled.
struct Inside<'a>(&'a Seen);

impl Drop for Inside<'_> {
    fn drop(&mut self) {
        self.0.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The index of the member that leads `cluster` now.
async fn leader(cluster: &EtcdCluster, alive: &[bool]) -> Option<usize> {
    for (index, member) in cluster.members.iter().enumerate() {
        if !alive[index] {
            continue;
        }
        let Ok(mut client) = etcd_client::Client::connect([etcd::url(member.port)], None).await
        else {
            continue;
        };
        let Ok(status) = client.status().await else {
            continue;
        };
        let own = status.header().map(|header| header.member_id());
        if own == Some(status.leader()) {
            return Some(index);
        }
    }
    None
}

/// The leader of a three-member cluster is killed with SIGKILL while four
/// locks are held and contended by twelve tasks on two stores (two
/// processes' worth). The survivors elect a new leader; no name is ever
/// held by two tasks at once; fencing tokens keep strictly increasing
/// across the failover; the stores keep granting locks without a restart.
/// Then a second member is killed: the one left is a minority, and must not
/// grant a lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_never_grants_a_name_twice_and_a_minority_grants_nothing() {
    let Some(mut cluster) = EtcdCluster::start_or_skip(3) else {
        return;
    };
    let endpoints = cluster.urls();
    let config = EtcdConfig::new().timeout(Duration::from_secs(2));
    let prefix = unique("failover");
    let stores = [
        LockManager::new(
            EtcdStore::connect_with(&endpoints, config.clone())
                .await
                .expect("connect"),
        )
        .with_prefix(prefix.clone()),
        LockManager::new(
            EtcdStore::connect_with(&endpoints, config.clone())
                .await
                .expect("connect"),
        )
        .with_prefix(prefix.clone()),
    ];
    let names = ["a", "b", "c", "d"];
    let seen: Arc<HashMap<&str, Seen>> =
        Arc::new(names.iter().map(|name| (*name, Seen::default())).collect());
    let running = Arc::new(AtomicBool::new(true));
    let granted = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for locks in &stores {
        for name in names {
            for _ in 0..3 - usize::from(name == "d") {
                let lock = locks
                    .lock(name, Duration::from_secs(5))
                    .wait_for(Duration::from_secs(10))
                    .fenced()
                    .renew()
                    .on_lost(OnLost::Cancel);
                let (seen, running) = (Arc::clone(&seen), Arc::clone(&running));
                let (granted, errors) = (Arc::clone(&granted), Arc::clone(&errors));
                workers.push(tokio::spawn(async move {
                    while running.load(Ordering::SeqCst) {
                        let out = lock
                            .run(async {
                                let here = &seen[name];
                                if here.inside.fetch_add(1, Ordering::SeqCst) != 0 {
                                    here.violations.fetch_add(1, Ordering::SeqCst);
                                }
                                let _inside = Inside(here);
                                let fence = lock_core::current()
                                    .and_then(|lease| lease.fence())
                                    .unwrap_or(0);
                                here.fences.lock().expect("unpoisoned").push(fence);
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                Ok::<_, lock_core::Error>(())
                            })
                            .await;
                        match out {
                            Ok(Some(())) => {
                                granted.fetch_add(1, Ordering::SeqCst);
                            }
                            Ok(None) => {}
                            Err(_) => {
                                errors.fetch_add(1, Ordering::SeqCst);
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                    }
                }));
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut alive = vec![true; 3];
    let first = leader(&cluster, &alive).await.expect("a leader");
    let before = granted.load(Ordering::SeqCst);
    let fences_before: HashMap<&str, usize> = names
        .iter()
        .map(|name| (*name, seen[name].fences.lock().expect("unpoisoned").len()))
        .collect();
    cluster.members[first].kill();
    alive[first] = false;
    let killed_at = Instant::now();
    // The survivors elect a new leader, and the stores carry on.
    let next = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(next) = leader(&cluster, &alive).await {
                return next;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the survivors elect a leader");
    let elected_in = killed_at.elapsed();
    tokio::time::sleep(Duration::from_secs(6)).await;
    running.store(false, Ordering::SeqCst);
    for worker in workers {
        tokio::time::timeout(Duration::from_secs(60), worker)
            .await
            .expect("a worker stops")
            .expect("worker ran");
    }
    let after = granted.load(Ordering::SeqCst) - before;
    let violations: usize = seen
        .values()
        .map(|name| name.violations.load(Ordering::SeqCst))
        .sum();
    println!(
        "etcd failover: member m{first} (the leader) killed; m{next} elected in {elected_in:?}; holders granted: {} before, {after} after; errors during the run: {}; concurrent-holder violations: {violations}",
        before,
        errors.load(Ordering::SeqCst)
    );
    for name in names {
        let fences = seen[name].fences.lock().expect("unpoisoned");
        let at = fences_before[name];
        let window = |range: std::ops::Range<usize>| fences[range].to_vec();
        println!(
            "  {name}: {} tokens; around the kill: {:?} | {:?}",
            fences.len(),
            window(at.saturating_sub(3)..at),
            window(at..(at + 3).min(fences.len()))
        );
        assert!(
            fences.windows(2).all(|pair| pair[0] < pair[1]),
            "{name}: fencing tokens strictly increase across the failover: {fences:?}"
        );
    }
    assert_eq!(violations, 0, "no name is ever held by two tasks at once");
    assert!(
        after > 0,
        "the stores keep granting locks after the failover, without a restart"
    );

    // A minority cannot grant: kill a second member, and the one left must
    // refuse (an error, never a lock).
    let second = (0..3).find(|index| alive[*index]).expect("two are left");
    cluster.members[second].kill();
    let minority = &stores[0];
    for attempt in 0..3 {
        let out = minority
            .lock(format!("minority:{attempt}"), Duration::from_secs(5))
            .acquire()
            .await;
        println!(
            "etcd minority: attempt {attempt}: {}",
            match &out {
                Ok(Some(_)) => "GRANTED".to_owned(),
                Ok(None) => "held".to_owned(),
                Err(error) => format!("refused ({error})"),
            }
        );
        assert!(
            !matches!(out, Ok(Some(_))),
            "a single member of three must not grant a lock"
        );
    }
}

/// `timeout(Duration::MAX)` is how a user asks for no time bound: every
/// call must work, not panic adding it to the clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_with_no_time_bound_works_instead_of_panicking() {
    let Some(endpoints) = etcd::etcd_endpoints() else {
        return;
    };
    let config = EtcdConfig::new().timeout(Duration::MAX);
    let store = EtcdStore::connect_with(&endpoints, config)
        .await
        .expect("connect with no time bound");
    lock_test_kit::contract::every_call_works_without_a_time_bound(LockManager::new(store)).await;
}

/// A TTL is rounded up to what the store keeps (whole seconds on etcd)
/// before it reaches the store, so it must be checked against the store's
/// minimum after that rounding: half a second under the minimum rounds up
/// to the minimum, which etcd keeps. Refusing it tells the user their TTL
/// is too short when the store would keep it as asked, and more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_that_rounds_up_to_the_minimum_is_accepted() {
    let Some(endpoints) = etcd::etcd_endpoints() else {
        return;
    };
    let store = EtcdStore::connect(&endpoints).await.expect("connect");
    let min = lock_core::LockStore::min_ttl(&store);
    let ttl = min - Duration::from_millis(500);
    let locks = LockManager::new(store).with_prefix(unique("min-ttl"));
    let guard = locks
        .lock("short", ttl)
        .acquire()
        .await
        .unwrap_or_else(|e| panic!("{ttl:?} rounds up to the minimum {min:?}: {e}"))
        .expect("free");
    assert!(
        guard
            .extend(ttl)
            .await
            .unwrap_or_else(|e| panic!("extending by {ttl:?}: {e}")),
        "extended"
    );
    assert!(guard.release().await.expect("release"), "released");
}

/// A release with less of its `at_least` claim left than etcd's shortest
/// lease shortens the lease to that shortest lease, as etcd itself would:
/// it must neither fail (leaving the guard to retry a refused extend until
/// the full TTL) nor keep the claim for the whole TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_release_with_less_claim_left_than_the_shortest_lease_ends_it_soon() {
    let Some(locks) = etcd::etcd_manager().await else {
        return;
    };
    let locks = locks.with_prefix(unique("at-least"));
    let min = locks.store().min_ttl();
    assert!(!min.is_zero(), "etcd keeps leases for at least its minimum");
    let lock = locks
        .lock("claim", Duration::from_secs(30))
        .at_least(min + Duration::from_millis(500));
    let guard = lock.acquire().await.expect("acquire").expect("free");
    // About half a second of the claim is left now, under the minimum
    // lease even rounded up to etcd's whole seconds.
    tokio::time::sleep(min).await;
    let released = guard.release().await;
    assert!(
        matches!(released, Ok(true)),
        "the release shortens the lease: {released:?}"
    );
    let holder = lock.holder().await.expect("holder").expect("still claimed");
    assert!(
        holder.remaining_ttl() <= min + Duration::from_secs(1),
        "the claim ends within the shortest lease, not the 30 s TTL: {holder:?}"
    );
}

/// A guard dropped as `#[tokio::main]` returns (`let _guard = ...` in a cron
/// binary's `main`) is given back before the process exits, under both
/// flavors of runtime: the next run must not find the lock held for the
/// rest of its TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_dropped_as_tokio_main_returns_is_given_back_before_the_process_exits() {
    let Some(endpoints) = etcd::etcd_endpoints() else {
        return;
    };
    let locks = LockManager::new(EtcdStore::connect(&endpoints).await.expect("connect"));
    children::main_returning_with_a_guard_gives_it_back(
        env!("CARGO_BIN_EXE_exit-child"),
        &endpoints.join(","),
        &locks,
        &[],
        Duration::from_secs(60),
    )
    .await;
}
