//! What the Redis store decodes: the holder script's reply, and its own
//! lease keys.

use ::redis::{ToRedisArgs, Value};

use super::Input;
use crate::store::redis::keys::{KeyArg, lease_key, store_key_of};
use crate::store::redis::operations::holders_of;

/// The holder script's reply and lease keys, from any bytes: no panic on
/// any reply; a reply the script could send (a kind, token and
/// remaining-ms pairs, a fenced writer's counter) decodes to exactly the
/// holders in it; any reply decodes to at most its pairs, one for a
/// fenced writer, and a fence only for one. A name's lease key reads back
/// as the name, is the one key that does, and is the bytes a command
/// argument writes, with each companion's suffix.
pub fn check_redis_replies(data: &[u8]) {
    let mut input = Input::new(data);
    let name = input.text(40);
    lease_keys(&name, &input.text(40));
    if input.below(2) == 0 {
        let kind = input.below(3) as i64;
        let mut reply = vec![Value::Int(kind)];
        let mut holders = Vec::new();
        for _ in 0..if kind == 2 { 1 } else { input.below(4) } {
            let token = input.bytes(40).to_vec();
            let remaining = i64::from(input.number() as i32);
            reply.push(Value::BulkString(token.clone()));
            reply.push(if input.below(2) == 0 {
                Value::Int(remaining)
            } else {
                Value::BulkString(remaining.to_string().into_bytes())
            });
            holders.push((token, remaining));
        }
        let mut fence = None;
        if kind == 2 {
            let counter = input.text(20);
            fence = counter.parse::<u64>().ok();
            reply.push(Value::BulkString(counter.into_bytes()));
        }
        let decoded = holders_of(reply.clone());
        assert_eq!(
            decoded.as_ref().ok(),
            Some(&(kind, holders, fence)),
            "{reply:?} decodes to its holders"
        );
    } else {
        let reply: Vec<Value> = (0..input.below(8)).map(|_| value(&mut input, 2)).collect();
        let pairs = reply.len().saturating_sub(1) / 2;
        if let Ok((kind, holders, fence)) = holders_of(reply.clone()) {
            assert!(
                holders.len() <= pairs,
                "{reply:?}: a holder per pair at most"
            );
            if kind == 2 {
                assert!(holders.len() <= 1, "{reply:?}: one fenced writer at most");
            }
            assert!(
                fence.is_none() || kind == 2,
                "{reply:?}: a fence only for kind 2"
            );
        }
    }
}

/// Any value a server could send, nested `depth` deep at most.
fn value(input: &mut Input<'_>, depth: usize) -> Value {
    match input.below(if depth == 0 { 8 } else { 11 }) {
        0 => Value::Nil,
        1 => Value::Int(i64::from(input.number() as i32) * i64::from(input.byte())),
        2 => Value::BulkString(input.bytes(24).to_vec()),
        3 => Value::SimpleString(input.text(24)),
        4 => Value::Okay,
        5 => Value::Double(f64::from(input.number() as i32) / 7.0),
        6 => Value::Boolean(input.below(2) == 0),
        7 => Value::BulkString(input.number().to_string().into_bytes()),
        8 => Value::Array(
            (0..input.below(4))
                .map(|_| value(input, depth - 1))
                .collect(),
        ),
        9 => Value::Set(
            (0..input.below(4))
                .map(|_| value(input, depth - 1))
                .collect(),
        ),
        _ => Value::Map(
            (0..input.below(3))
                .map(|_| (value(input, depth - 1), value(input, depth - 1)))
                .collect(),
        ),
    }
}

/// A name's lease key: read back, unique, and written alike by
/// [`KeyArg`] (on the stack or, past its buffer, on the heap).
fn lease_keys(name: &str, other: &str) {
    // `{}` reads as the empty name, which has no lease: no key to compare.
    if let Some(key) = store_key_of(other).filter(|key| !key.is_empty()) {
        let again = lease_key(&key).expect("a key read from a lease key is not empty");
        assert_eq!(
            again, other,
            "{other:?} is read as {key:?}, whose lease key differs"
        );
    }
    let Ok(key) = lease_key(name) else {
        assert!(name.is_empty(), "only an empty name has no lease key");
        return;
    };
    assert_eq!(
        store_key_of(&key).as_deref(),
        Some(name),
        "{key:?} reads back"
    );
    let long = name.repeat(1 + 300 / name.len().max(1));
    for name in [name, long.as_str()] {
        let key = lease_key(name).expect("not empty");
        for (arg, suffix) in [
            (KeyArg::lease(name), ""),
            (KeyArg::waiters(name), ":waiters"),
            (KeyArg::readers(name), ":readers"),
            (KeyArg::writer_waits(name), ":writer-waits"),
            (KeyArg::fence(name), ":fence"),
        ] {
            assert_eq!(
                arg.to_redis_args(),
                vec![format!("{key}{suffix}").into_bytes()],
                "the argument of {name:?} with {suffix:?}"
            );
        }
    }
}
