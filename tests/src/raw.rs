//! The least a correct lock does, written by hand, on Redis and in memory:
//! the baselines the benchmark and `lock-pairs` measure lock-core against.

use redis::aio::ConnectionLike;

/// Compare-and-delete on the owner token.
pub const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// One uncontended pair on `key`: `SET key token NX PX 30000` with a fresh
/// random token, then the compare-and-delete `release` (a
/// [`redis::Script`] of [`RELEASE`]). Panics when the key was held or the
/// release found another token: the baseline runs uncontended.
pub async fn pair<C: ConnectionLike + Send>(
    connection: &mut C,
    release: &redis::Script,
    key: &str,
) {
    let token = format!("{:032x}", rand::random::<u128>());
    let set: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query_async(connection)
        .await
        .expect("SET");
    assert!(set.is_some(), "uncontended");
    let deleted: i64 = release
        .key(key)
        .arg(&token)
        .invoke_async(connection)
        .await
        .expect("release");
    assert_eq!(deleted, 1);
}

/// The least a process-local lease table does per pair: insert `key` (an
/// owned copy) with a fresh `u128` token if absent, then remove it if the
/// token is still ours.
#[inline]
pub fn mutex_pair(table: &std::sync::Mutex<std::collections::HashMap<String, u128>>, key: &str) {
    let key = key.to_owned();
    let token: u128 = rand::random();
    {
        let mut table = table.lock().expect("unpoisoned");
        table.entry(key.clone()).or_insert(token);
    }
    let mut table = table.lock().expect("unpoisoned");
    if table.get(&key) == Some(&token) {
        table.remove(&key);
    }
}
