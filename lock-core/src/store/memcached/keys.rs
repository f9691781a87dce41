//! Where a lease lives in memcached: keys any lock name can have, and TTLs
//! in the whole seconds memcached keeps.
//!
//! Memcached keys are at most 250 bytes, without spaces or control
//! characters; lock names may hold anything (spaces, newlines, unicode, a
//! kilobyte of text). Keys are sent in the meta protocol's binary form (the
//! `b` flag: base64 on the wire), so every byte is allowed: a store key of
//! up to [`RAW_MAX`] bytes is kept as itself behind a `k`, and a longer one
//! as the SHA-256 of it behind an `h`. The two forms never meet (their first
//! byte differs), the first is injective, and two names share a hashed key
//! only if they collide under SHA-256, which is not a practical concern.

use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::Result;
use crate::store::kit::check_key;

/// The longest store key kept as itself: with its one-byte tag, base64
/// makes it at most 244 bytes, within memcached's 250.
pub(super) const RAW_MAX: usize = 180;

/// The longest TTL memcached takes as a duration: 30 days. A larger number
/// is read as a Unix time; the store adds a second (see [`exptime`]), so it
/// accepts one second less.
pub(super) const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 60 * 60 - 1);

/// The key of the lease for the store key `key`, base64-encoded for the
/// meta protocol's `b` flag.
pub(super) fn lease_key(key: &str) -> Result<String> {
    check_key(key)?;
    let mut binary = Vec::with_capacity(RAW_MAX + 1);
    if key.len() <= RAW_MAX {
        binary.push(b'k');
        binary.extend_from_slice(key.as_bytes());
    } else {
        binary.push(b'h');
        binary.extend_from_slice(&Sha256::digest(key.as_bytes()));
    }
    Ok(base64(&binary))
}

/// The exptime for a lease of `ttl`: whole seconds, rounded up, plus one.
///
/// Memcached's clock ticks once a second, and an item stored with exptime
/// `n` expires when that clock has advanced `n` times, which can be as
/// little as `n - 1` seconds later. One second more keeps every lease at
/// least as long as its TTL (a 1.5 s lease lasts between 2 and 3 s), and
/// never 0, which memcached reads as "never expires".
pub(super) fn exptime(ttl: Duration) -> u64 {
    let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    seconds.max(1) + 1
}

/// Standard base64 with padding: what the meta protocol's `b` flag reads.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let sextet = |shift: u32| char::from(ALPHABET[((n >> shift) & 63) as usize]);
        out.push(sextet(18));
        out.push(sextet(12));
        out.push(if chunk.len() > 1 { sextet(6) } else { '=' });
        out.push(if chunk.len() > 2 { sextet(0) } else { '=' });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_reference_vectors() {
        // RFC 4648, section 10.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
    }

    // Every name a lock can have must make a valid memcached key, and
    // distinct names distinct keys, or two locks would be one.
    #[test]
    fn every_name_makes_a_short_key_and_distinct_names_distinct_keys() {
        let long = "x".repeat(1024);
        let names = [
            "lock:a".to_owned(),
            "lock:with space\nand newline".to_owned(),
            "lock:ünïcödé {braces}".to_owned(),
            "k".repeat(RAW_MAX),
            "k".repeat(RAW_MAX + 1),
            long.clone(),
            format!("{long}y"),
        ];
        let keys: std::collections::HashSet<String> = names
            .iter()
            .map(|name| lease_key(name).expect("non-empty"))
            .collect();
        assert_eq!(keys.len(), names.len(), "one key per name");
        for key in &keys {
            assert!(key.len() <= 250, "{} bytes", key.len());
            assert!(
                key.bytes().all(|b| b.is_ascii_graphic()),
                "no spaces or control characters: {key}"
            );
        }
        assert!(lease_key("").is_err(), "an empty key is refused");
    }

    // A lease must never be shorter than its TTL, and 0 means "never".
    #[test]
    fn exptimes_round_up_and_add_the_clock_tick() {
        assert_eq!(exptime(Duration::from_millis(1)), 2);
        assert_eq!(exptime(Duration::from_millis(1500)), 3);
        assert_eq!(exptime(Duration::from_secs(2)), 3);
        assert_eq!(exptime(MAX_TTL), 30 * 24 * 60 * 60, "still relative");
    }
}
