//! Where a lease lives in Redis: key encoding, cluster hash tags and
//! millisecond TTLs.
//!
//! The lease for the store key `lock:reports:acme` lives at the Redis key
//! `{lock:reports:acme}`; its companions (the "somebody waits" marker and a
//! fenced lock's counter) add a suffix after the braces. The braces make the
//! whole escaped key the cluster hash tag, so a lease and its companions are
//! always in one slot (no `CROSSSLOT` in a script touching several), while
//! different names spread over all slots. `%` and `}` in the store key are
//! written `%25` and `%7D`, so a name's braces can never end the tag early.

use std::time::Duration;

use ::redis::{RedisWrite, ToRedisArgs};

use crate::Result;
use crate::store::kit::check_key;

/// The Redis key of a lease: the escaped store key, wrapped in braces so it
/// is the hash tag.
pub(crate) fn lease_key(key: &str) -> Result<String> {
    check_key(key)?;
    let mut out = String::with_capacity(key.len() + 8);
    out.push('{');
    escape_into(key, |piece| out.push_str(piece));
    out.push('}');
    Ok(out)
}

/// A lease key (or one of its companions) as a command argument, written
/// straight into the command: the same bytes as [`lease_key`] (plus the
/// companion's suffix), without building a `String` first. Every acquire
/// and release sends one or more of these.
#[derive(Clone, Copy)]
pub(crate) struct KeyArg<'a> {
    key: &'a str,
    suffix: &'static str,
}

impl<'a> KeyArg<'a> {
    /// The lease of the store key `key`.
    pub(crate) fn lease(key: &'a str) -> Self {
        KeyArg { key, suffix: "" }
    }

    /// The "somebody waits" marker of the lease of `key`.
    pub(crate) fn waiters(key: &'a str) -> Self {
        KeyArg {
            key,
            suffix: WAITERS_SUFFIX,
        }
    }

    /// The readers of the read side of the lease of `key`: a sorted set of
    /// reader tokens, each scored with when its lease ends (the server's
    /// clock, in ms).
    pub(crate) fn readers(key: &'a str) -> Self {
        KeyArg {
            key,
            suffix: READERS_SUFFIX,
        }
    }

    /// The claims of the writers waiting for the readers of the lease of
    /// `key`: a sorted set of their tokens, each scored with when its claim
    /// ends; while one lives, new readers wait behind those writers.
    pub(crate) fn writer_waits(key: &'a str) -> Self {
        KeyArg {
            key,
            suffix: WRITER_WAITS_SUFFIX,
        }
    }

    /// Which holder of the lease of `key` is an election's leader: the
    /// token of the term the fencing counter last numbered.
    pub(super) fn elected(key: &'a str) -> Self {
        KeyArg {
            key,
            suffix: ELECTED_SUFFIX,
        }
    }

    /// Which holder of the lease of `key` the fencing counter's last token
    /// went to.
    pub(super) fn fenced(key: &'a str) -> Self {
        KeyArg {
            key,
            suffix: FENCED_SUFFIX,
        }
    }

    /// The fencing counter of the lease of `key`.
    pub(crate) fn fence(key: &'a str) -> Self {
        KeyArg {
            key,
            suffix: FENCE_SUFFIX,
        }
    }

    /// About how many bytes the argument takes (exact unless the key needs
    /// escaping).
    pub(crate) fn len_hint(&self) -> usize {
        self.key.len() + 2 + self.suffix.len()
    }
}

impl ToRedisArgs for KeyArg<'_> {
    fn write_redis_args<W>(&self, out: &mut W)
    where
        W: ?Sized + RedisWrite,
    {
        // Assembled on the stack and handed over as one argument: cheaper
        // than writing each piece into the command through `io::Write`.
        let mut buffer = [0u8; 256];
        let mut len = 0;
        let mut fits = true;
        let mut put = |piece: &str| {
            match buffer.get_mut(len..len + piece.len()) {
                Some(room) => room.copy_from_slice(piece.as_bytes()),
                None => fits = false,
            }
            len += piece.len();
        };
        put("{");
        escape_into(self.key, &mut put);
        put("}");
        put(self.suffix);
        if fits {
            out.write_arg(&buffer[..len]);
        } else {
            let mut long = Vec::with_capacity(len);
            escape_into(self.key, |piece| long.extend_from_slice(piece.as_bytes()));
            out.write_arg(&[b"{", &long[..], b"}", self.suffix.as_bytes()].concat());
        }
    }
}

/// Passes `key` to `out` in pieces, with `%` and `}` written `%25` and `%7D`.
fn escape_into(key: &str, mut out: impl FnMut(&str)) {
    // Runs between the characters that need escaping are passed whole. Both
    // are ASCII, so a byte search finds them (a `char` pattern decodes every
    // character, which cost more than the rest of building the key).
    let mut rest = key;
    while let Some(at) = rest.bytes().position(|byte| byte == b'%' || byte == b'}') {
        out(&rest[..at]);
        out(if rest.as_bytes()[at] == b'%' {
            "%25"
        } else {
            "%7D"
        });
        rest = &rest[at + 1..];
    }
    out(rest);
}

/// The `SCAN ... MATCH` pattern of every lease whose store key starts with
/// `prefix`, and of nothing else: `{`, the escaped prefix with the glob's own
/// special characters quoted, `*`, `}`. A lease key's only `}` is its last
/// character, so companions (`...}:waiters`, `...}:fence`) never match.
pub(crate) fn lease_pattern(prefix: &str) -> String {
    let mut escaped = String::with_capacity(prefix.len() + 4);
    escape_into(prefix, |piece| escaped.push_str(piece));
    let mut pattern = String::with_capacity(escaped.len() + 8);
    pattern.push('{');
    for c in escaped.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push_str("*}");
    pattern
}

/// The store key a lease key stands for: the braces removed and the
/// escaping undone. `None` for a key that is not a lease key.
pub(crate) fn store_key_of(lease: &str) -> Option<String> {
    let inner = lease.strip_prefix('{')?.strip_suffix('}')?;
    if inner.contains('}') {
        return None;
    }
    let mut key = String::with_capacity(inner.len());
    let mut rest = inner;
    while let Some(at) = rest.find('%') {
        key.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3)?;
        key.push(match escape {
            "%25" => '%',
            "%7D" => '}',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    key.push_str(rest);
    Some(key)
}

/// What follows a lease key in its "somebody waits" marker's key; same slot.
const WAITERS_SUFFIX: &str = ":waiters";

/// What follows a lease key in its readers' key; same slot.
const READERS_SUFFIX: &str = ":readers";

/// What follows a lease key in its "a writer waits" marker's key; same slot.
const WRITER_WAITS_SUFFIX: &str = ":writer-waits";

/// What follows a lease key in the key naming an election's leader; same
/// slot.
const ELECTED_SUFFIX: &str = ":elected";

/// What follows a lease key in the key naming the holder its fencing
/// counter's last token went to; same slot. No expiry, as the counter's: a
/// value naming a holder that is gone names no holder the lease has.
const FENCED_SUFFIX: &str = ":fenced";

/// What follows a lease key in its fencing counter's key; same slot. The
/// counter has no expiry: one that vanished would start again at 1 and hand
/// out tokens older than ones already seen.
const FENCE_SUFFIX: &str = ":fence";

/// `duration` in whole milliseconds, rounded up (a lease is kept at least as
/// long as asked, never less), and at least 1.
pub(crate) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos().div_ceil(1_000_000))
        .unwrap_or(u64::MAX)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;

    /// The bytes `arg` puts in a command, as text.
    fn written(arg: KeyArg<'_>) -> String {
        let mut args = arg.to_redis_args();
        assert_eq!(args.len(), 1, "a key is one argument");
        String::from_utf8(args.remove(0)).expect("a key written from text is text")
    }

    #[test]
    fn a_key_argument_writes_the_lease_key_and_its_companions_suffixes() {
        for key in ["lock:a", "lock:{x}", "100%", "ünï}%"] {
            let lease = lease_key(key).expect("non-empty key");
            assert_eq!(written(KeyArg::lease(key)), lease);
            assert_eq!(written(KeyArg::waiters(key)), format!("{lease}:waiters"));
            assert_eq!(written(KeyArg::fence(key)), format!("{lease}:fence"));
        }
    }

    /// The slot Redis Cluster computes for a key, following its hash tag rule.
    fn slot(key: &str) -> u16 {
        let bytes = key.as_bytes();
        let tagged = bytes.iter().position(|&b| b == b'{').and_then(|open| {
            let close = bytes[open + 1..].iter().position(|&b| b == b'}')?;
            (close > 0).then(|| &bytes[open + 1..open + 1 + close])
        });
        crc16(tagged.unwrap_or(bytes)) % 16384
    }

    /// CRC16/XMODEM, the checksum Redis Cluster uses for slots.
    fn crc16(bytes: &[u8]) -> u16 {
        let mut crc: u16 = 0;
        for &byte in bytes {
            crc ^= u16::from(byte) << 8;
            for _ in 0..8 {
                crc = if crc & 0x8000 != 0 {
                    (crc << 1) ^ 0x1021
                } else {
                    crc << 1
                };
            }
        }
        crc
    }

    #[test]
    fn the_slot_function_matches_the_redis_cluster_reference_values() {
        // Values from the cluster specification; they prove the helper the
        // next tests rely on computes slots the way Redis does.
        assert_eq!(crc16(b"123456789"), 0x31C3, "CRC16 reference value");
        assert_eq!(slot("{user1000}.following"), slot("{user1000}.followers"));
        assert_eq!(
            slot("foo{}{bar}"),
            crc16(b"foo{}{bar}") % 16384,
            "empty tag hashes the whole key"
        );
    }

    #[test]
    fn a_lease_and_its_waiters_marker_share_a_slot_whatever_braces_the_name_holds() {
        // Both keys are touched by one script; in different slots a cluster
        // refuses the script with CROSSSLOT.
        for key in [
            "lock:plain",
            "lock:{tenant}:report",
            "lock:}{",
            "lock:}",
            "lock:{",
            "{}",
            "}}}}",
            "lock:%7D",
            "lock:with space\nand newline ünïcödé",
        ] {
            let lease = lease_key(key).expect("non-empty key");
            assert_eq!(
                slot(&lease),
                slot(&written(KeyArg::waiters(key))),
                "lease {lease:?} and its marker must share a slot"
            );
            assert_eq!(
                slot(&lease),
                crc16(&lease.as_bytes()[1..lease.len() - 1]) % 16384,
                "the tag of {lease:?} must be the whole escaped name"
            );
        }
    }

    #[test]
    fn braces_and_percent_signs_are_escaped_and_nothing_else() {
        // The escaping is what keeps a name's hash tag whole; a wrong escape
        // would either split the tag (CROSSSLOT) or merge two names.
        let cases = [
            ("lock:a", "{lock:a}"),
            ("lock:a}b%c", "{lock:a%7Db%25c}"),
            ("}}%%", "{%7D%7D%25%25}"),
            ("lock:{tenant}", "{lock:{tenant%7D}"),
            ("lock:\u{e9}t\u{e9} }", "{lock:\u{e9}t\u{e9} %7D}"),
        ];
        for (key, expected) in cases {
            assert_eq!(
                lease_key(key).expect("non-empty"),
                expected,
                "escaping {key:?}"
            );
        }
    }

    #[test]
    fn distinct_names_never_share_a_lease_key() {
        // Escaping must be injective, or two locks would be one.
        let names = ["a}", "a%7D", "a%257D", "a%", "a%25", "a"];
        let keys: std::collections::HashSet<String> = names
            .iter()
            .map(|n| lease_key(n).expect("non-empty"))
            .collect();
        assert_eq!(
            keys.len(),
            names.len(),
            "every name needs its own key: {keys:?}"
        );
    }

    #[test]
    fn different_names_spread_across_slots() {
        // One hot slot would put every lock on one cluster node.
        let slots: std::collections::HashSet<u16> = (0..200)
            .map(|i| slot(&lease_key(&format!("lock:job-{i}")).expect("non-empty")))
            .collect();
        assert!(
            slots.len() > 150,
            "200 names landed in only {} slots",
            slots.len()
        );
    }

    /// Redis's glob matching, enough of it for the patterns `lease_pattern`
    /// makes: `*`, and `\\` quoting the next character.
    fn glob(pattern: &[char], text: &[char]) -> bool {
        match pattern.split_first() {
            None => text.is_empty(),
            Some(('*', rest)) => (0..=text.len()).any(|skip| glob(rest, &text[skip..])),
            Some(('\\', rest)) => match (rest.split_first(), text.split_first()) {
                (Some((p, rest)), Some((t, text))) => p == t && glob(rest, text),
                _ => false,
            },
            Some((p, rest)) => text
                .split_first()
                .is_some_and(|(t, text)| p == t && glob(rest, text)),
        }
    }

    fn matches(pattern: &str, key: &str) -> bool {
        let pattern: Vec<char> = pattern.chars().collect();
        let key: Vec<char> = key.chars().collect();
        glob(&pattern, &key)
    }

    #[test]
    fn the_listing_pattern_matches_the_prefixs_leases_and_nothing_else() {
        for prefix in ["lock:", "a*b?[c]\\d}%:", ""] {
            let pattern = lease_pattern(prefix);
            for name in ["x", "reports:{acme}", "*", "%7D}"] {
                let key = format!("{prefix}{name}");
                let lease = lease_key(&key).expect("non-empty");
                assert!(matches(&pattern, &lease), "{pattern} must match {lease}");
                assert!(
                    !matches(&pattern, &written(KeyArg::waiters(&key))),
                    "{pattern} must not match the marker of {lease}"
                );
                assert!(
                    !matches(&pattern, &written(KeyArg::fence(&key))),
                    "{pattern} must not match the counter of {lease}"
                );
                assert_eq!(
                    store_key_of(&lease).as_deref(),
                    Some(&*format!("{prefix}{name}")),
                    "decoding {lease}"
                );
            }
        }
        assert!(
            !matches(
                &lease_pattern("lock:"),
                &lease_key("other:x").expect("non-empty")
            ),
            "another prefix's lease"
        );
        assert!(
            !matches(&lease_pattern("a*"), &lease_key("abc").expect("non-empty")),
            "a star in the prefix is a star, not a wildcard"
        );
        assert_eq!(store_key_of("{a}:fence"), None);
        assert_eq!(store_key_of("{a%zz}"), None);
    }

    #[test]
    fn an_empty_key_is_an_error_not_a_whole_key_hash() {
        // `{}` would make Redis hash the whole key, splitting lease and marker.
        assert!(matches!(lease_key(""), Err(Error::InvalidName { .. })));
    }
}
