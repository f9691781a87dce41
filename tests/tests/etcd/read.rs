//! The read side of `EtcdStore` where the contract suite does not reach: a
//! waiting writer's claim (held while it waits, gone when it gives up), a
//! reader's extend, and the keys a read lock leaves in etcd.
//!
//! Time bounds are hang guards unless the bound is the behaviour under test.

use std::time::{Duration, Instant};

use etcd_client::{Client, GetOptions};
use lock_core::{EtcdStore, LockManager};
use lock_tests::etcd;

const LONG: Duration = Duration::from_secs(60);

fn unique(what: &str) -> String {
    let id: u64 = rand::random();
    format!("test-{what}-{id:016x}:")
}

/// A manager under a prefix of its own, and a raw client on the same etcd.
async fn setup(what: &str) -> Option<(LockManager, Client, String)> {
    let endpoints = etcd::etcd_endpoints()?;
    let store = EtcdStore::connect(&endpoints).await.expect("connect");
    let prefix = unique(what);
    let client = Client::connect(&endpoints, None).await.expect("raw client");
    Some((LockManager::new(store).with_prefix(&prefix), client, prefix))
}

/// Every key under `prefix`, as text (NUL bytes shown as `\0`).
async fn keys_under(client: &mut Client, prefix: &str) -> Vec<String> {
    let answer = client
        .get(
            prefix,
            Some(GetOptions::new().with_prefix().with_keys_only()),
        )
        .await
        .expect("get");
    answer
        .kvs()
        .iter()
        .map(|kv| String::from_utf8_lossy(kv.key()).replace('\0', "\\0"))
        .collect()
}

/// The claim of the writer waiting for `name` under `prefix`, if there is
/// one now (one writer waits in each test).
async fn claim_now(client: &Client, prefix: &str, name: &str) -> Option<etcd_client::KeyValue> {
    let claims = format!("{prefix}{name}\0writer-wait\0");
    let found = client
        .clone()
        .get(claims, Some(GetOptions::new().with_prefix()))
        .await
        .expect("get");
    found.kvs().first().cloned()
}

/// The claim of the writer waiting for `name`, once it has put it.
async fn claimed(client: &Client, prefix: &str, name: &str) -> etcd_client::KeyValue {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(claim) = claim_now(client, prefix, name).await {
            return claim;
        }
        assert!(
            Instant::now() < deadline,
            "the waiting writer never claimed the name"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A writer waiting for a reader claims the name: new readers are held
/// off. When it gives up, its claim goes with it at once, not when the
/// claim's lease would run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writers_claim_holds_new_readers_off_and_goes_when_it_gives_up() {
    let Some((locks, client, prefix)) = setup("claim").await else {
        return;
    };
    let reader = locks
        .lock("shelf", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let writer = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("shelf", LONG).wait_for(LONG).acquire().await })
    };
    claimed(&client, &prefix, "shelf").await;
    let late = locks
        .lock("shelf", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire");
    assert!(
        late.is_none(),
        "a new reader waits behind the waiting writer"
    );

    writer.abort();
    let _ = writer.await;
    let gave_up = Instant::now();
    let admitted = locks
        .lock("shelf", LONG)
        .read()
        .wait_for(Duration::from_secs(10))
        .acquire()
        .await
        .expect("acquire");
    let waited = gave_up.elapsed();
    eprintln!("a reader got in {waited:?} after the waiting writer gave up");
    assert!(
        admitted.is_some(),
        "the writer that gave up holds nobody off"
    );
    assert!(
        waited < Duration::from_secs(1),
        "the claim outlived the writer's wait: a reader waited {waited:?} (a claim lasts 2 s or more)"
    );
    drop(admitted);
    assert!(reader.release().await.expect("release"));
}

/// A reader's lease is renewed on its own key: held past its TTL, the
/// other reader's untouched, and a writer still held off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_readers_lease_is_extended_on_its_own_key() {
    let Some((locks, _client, _)) = setup("extend").await else {
        return;
    };
    let ttl = locks.store().min_ttl().max(Duration::from_secs(2));
    let reader = locks
        .lock("page", ttl)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let other = locks
        .lock("page", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("readers share");
    assert!(
        reader.extend(ttl * 3).await.expect("extend"),
        "the reader's own lease"
    );
    tokio::time::sleep(ttl + Duration::from_secs(1)).await;
    assert!(
        reader.is_still_held().await.expect("check"),
        "extended past its first TTL"
    );
    assert!(other.is_still_held().await.expect("check"));
    let writer = locks.lock("page", LONG).acquire().await.expect("acquire");
    assert!(writer.is_none(), "readers still hold the name");
    assert!(other.release().await.expect("release"));
    assert!(reader.release().await.expect("release"));
}

/// Readers, their claims and the writer are keys of one name: a
/// force-release frees them all, and nothing is left in etcd.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_release_frees_every_reader_of_a_name() {
    let Some((locks, mut client, prefix)) = setup("force").await else {
        return;
    };
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(
            locks
                .lock("index", LONG)
                .read()
                .acquire()
                .await
                .expect("acquire")
                .expect("readers share"),
        );
    }
    assert!(
        locks
            .lock("index", LONG)
            .force_release()
            .await
            .expect("force")
    );
    for reader in &readers {
        assert!(!reader.is_still_held().await.expect("check"));
    }
    assert_eq!(keys_under(&mut client, &prefix).await, Vec::<String>::new());
    let writer = locks.lock("index", LONG).acquire().await.expect("acquire");
    assert!(writer.is_some(), "the name is free");
}

/// A name with a NUL byte would share keys with another name's readers:
/// refused with a message that says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_a_nul_byte_is_refused() {
    let Some((locks, _client, _)) = setup("nul").await else {
        return;
    };
    let refused = locks.lock("a\0reader\0b", LONG).acquire().await;
    match refused {
        Err(lock_core::Error::InvalidName { reason, .. }) => {
            assert!(reason.contains("NUL"), "{reason}");
        }
        other => panic!("a name with a NUL byte: {other:?}"),
    }
}

/// A reader leaving while others stay frees nothing for the waiting
/// writer: it must not send the writer through another round (a lease
/// grant, a transaction, a fresh claim: six writes to the cluster) for
/// each of them. Counted by the versions of the writer's claim key, one
/// per claim it puts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_leaving_while_others_stay_do_not_rerun_the_waiting_writer() {
    let Some((locks, client, prefix)) = setup("rounds").await else {
        return;
    };
    let mut readers = Vec::new();
    for _ in 0..21 {
        let reader = locks.lock("doc", LONG).read().acquire().await;
        readers.push(reader.expect("acquire").expect("readers share"));
    }
    let last = readers.pop().expect("21 readers");
    let writer = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let lock = locks.lock("doc", LONG).wait_for(Duration::from_secs(30));
            lock.acquire().await.expect("acquire").is_some()
        })
    };
    // Each put of the claim is a version of its key (it is moved from
    // lease to lease, never deleted, while the writer waits).
    let claim_puts = || async {
        claim_now(&client, &prefix, "doc")
            .await
            .map_or(0, |claim| claim.version())
    };
    let before = claimed(&client, &prefix, "doc").await.version();
    for reader in readers {
        assert!(reader.release().await.expect("release"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let rounds = claim_puts().await - before;
    eprintln!("the waiting writer claimed again {rounds} times while 20 of 21 readers left");
    assert!(last.release().await.expect("release"));
    assert!(
        writer.await.expect("writer task"),
        "the writer gets the name"
    );
    assert!(
        rounds <= 2,
        "each reader leaving sent the writer through another round: {rounds} claims"
    );
}

/// A name with a NUL byte is refused by every operation, not only by
/// acquire: force-releasing `index\0reader` would otherwise delete the
/// readers of `index`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_operation_takes_a_name_with_a_nul_byte() {
    let Some((locks, _client, _)) = setup("nul-ops").await else {
        return;
    };
    let reader = locks
        .lock("index", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let other = locks.lock("index\0reader", LONG);
    assert!(matches!(
        other.force_release().await,
        Err(lock_core::Error::InvalidName { .. })
    ));
    assert!(matches!(
        other.holders().await,
        Err(lock_core::Error::InvalidName { .. })
    ));
    assert!(
        reader.is_still_held().await.expect("check"),
        "the reader of the other name is untouched"
    );
    assert!(reader.release().await.expect("release"));
}

/// A writer on a slow link (every reply from etcd 350 ms late) waits
/// behind a reader: its claim holds new readers off the whole time, since
/// its lease is kept alive rather than put again on a timer the slow
/// replies outrun.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_writers_claim_never_lapses_while_it_waits() {
    let Some(endpoints) = etcd::etcd_endpoints() else {
        return;
    };
    let upstream = endpoints[0].trim_start_matches("http://").to_owned();
    let proxy = lock_tests::proxy::Proxy::start(&upstream)
        .await
        .expect("proxy");
    let prefix = unique("slow-claim");
    let fast = LockManager::new(EtcdStore::connect(&endpoints).await.expect("connect"))
        .with_prefix(&prefix);
    let config = lock_core::EtcdConfig::default().timeout(Duration::from_secs(10));
    let slow_store = EtcdStore::connect_with(&[proxy.url("http")], config)
        .await
        .expect("connect through the proxy");
    let slow = LockManager::new(slow_store).with_prefix(&prefix);
    let held = fast
        .lock("doc", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    proxy.set_delay(Duration::from_millis(350));
    let writer = tokio::spawn(async move {
        slow.lock("doc", LONG)
            .wait_for(Duration::from_secs(30))
            .acquire()
            .await
    });
    let client = Client::connect(&endpoints, None).await.expect("raw client");
    claimed(&client, &prefix, "doc").await;
    let (mut overtook, mut samples) = (0, 0);
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        samples += 1;
        if let Some(reader) = fast
            .lock("doc", LONG)
            .read()
            .acquire()
            .await
            .expect("acquire")
        {
            overtook += 1;
            assert!(reader.release().await.expect("release"));
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    eprintln!("{overtook} of {samples} new readers went ahead of the slow waiting writer");
    assert!(held.release().await.expect("release"));
    let writer = writer.await.expect("writer task").expect("acquire");
    assert!(writer.is_some(), "the writer gets the name");
    assert_eq!(overtook, 0, "new readers went ahead of the waiting writer");
}

/// A claim that ends while its writer still waits (its lease revoked here,
/// as a renewal that failed would leave it to run out) does not leave the
/// writer behind a stream of overlapping readers: the writer is woken,
/// claims again, and gets the name once the readers inside are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_whose_claim_ended_claims_again() {
    let Some((locks, mut client, prefix)) = setup("lapsed").await else {
        return;
    };
    let first = locks
        .lock("doc", LONG)
        .read()
        .acquire()
        .await
        .expect("acquire")
        .expect("free");
    let writer = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let lock = locks.lock("doc", LONG).wait_for(Duration::from_secs(40));
            let got = lock.acquire().await.expect("acquire");
            (got, Instant::now())
        })
    };
    let lease = claimed(&client, &prefix, "doc").await.lease();
    client
        .lease_revoke(lease)
        .await
        .expect("revoke the claim's lease");
    let ended = Instant::now();
    // Overlapping readers from now on: a new one comes before the oldest
    // leaves, so some reader always holds the name unless held off.
    let mut held = std::collections::VecDeque::from([first]);
    let mut went_ahead = 0;
    let stop = Instant::now() + Duration::from_secs(12);
    while Instant::now() < stop && !writer.is_finished() {
        let admitted = locks
            .lock("doc", LONG)
            .read()
            .acquire()
            .await
            .expect("acquire");
        let came = admitted.is_some();
        if let Some(reader) = admitted {
            went_ahead += 1;
            held.push_back(reader);
        }
        if held.len() > 1 || !came {
            if let Some(oldest) = held.pop_front() {
                oldest.release().await.expect("release");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for reader in held {
        reader.release().await.expect("release");
    }
    let (got, at) = writer.await.expect("writer task");
    let waited = at.saturating_duration_since(ended);
    eprintln!(
        "the writer got the name {waited:?} after its claim ended; {went_ahead} readers went ahead"
    );
    assert!(got.is_some(), "the writer gets the name");
    assert!(
        waited < Duration::from_secs(5),
        "the writer whose claim ended waited {waited:?} while {went_ahead} readers went ahead"
    );
}
