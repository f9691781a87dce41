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

/// A writer waiting for a reader claims the name: new readers are held
/// off. When it gives up, its claim goes with it at once, not when the
/// claim's lease would run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_writers_claim_holds_new_readers_off_and_goes_when_it_gives_up() {
    let Some((locks, mut client, prefix)) = setup("claim").await else {
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
    let deadline = Instant::now() + Duration::from_secs(10);
    while !keys_under(&mut client, &prefix)
        .await
        .iter()
        .any(|key| key.contains("\\0writer-wait\\0"))
    {
        assert!(
            Instant::now() < deadline,
            "the waiting writer never claimed the name"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
