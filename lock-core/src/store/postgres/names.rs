//! Where a lock name lives in the lease table: a row key for any name.
//!
//! Lock names may hold anything, but a PostgreSQL `text` cannot hold a NUL
//! byte, and a primary-key entry cannot exceed about 2.7 KB once PostgreSQL
//! has tried to compress it (so a long name of random characters fails
//! where a long repetitive one passes). A store key that could fail is kept
//! as a hash instead, the way the memcached store keeps its long keys:
//!
//! - a key of at most [`RAW_MAX`] bytes, with no NUL and no [`MARK`], is
//!   the row's name as it is (so is every name that worked before, except
//!   ones over [`RAW_MAX`] bytes that PostgreSQL managed to compress, and
//!   ones that held [`MARK`]);
//! - any other key is its *head* (its first bytes, up to the first NUL or
//!   [`MARK`], at most [`HEAD_MAX`] bytes) followed by [`MARK`] and the
//!   SHA-256 of the whole key in hex.
//!
//! The two forms never meet (only the second holds [`MARK`]), and two keys
//! share a hashed name only if they collide under SHA-256, which is not a
//! practical concern. A key that already is a hashed name (as `list` shows
//! it) is kept as it is, so it names the row `list` showed. The head keeps the key's prefix, so `list` still finds
//! such a name under its manager's prefix, and shows it as the hashed form:
//! the whole name is not kept.

use std::borrow::Cow;
use std::fmt::Write;

use sha2::{Digest, Sha256};

/// The longest key kept as it is: inside the 2,704 bytes a primary-key
/// entry may take (with its headers), whatever its bytes, and as close to
/// it as is safe, so that few names that worked before move to a hashed
/// row (a process of an earlier version would lease such a name in its
/// old row).
pub(super) const RAW_MAX: usize = 2600;

/// The most of a hashed key's head that is kept.
pub(super) const HEAD_MAX: usize = 1024;

/// What separates a hashed key's head from its hash. A key holding it is
/// hashed too, so no key kept as it is can look like a hashed one.
pub(super) const MARK: &str = "\u{1}sha256:";

/// The row name of `key`. A key that already is a row name in the hashed
/// form (as `list` shows it) names that row, so an operator can inspect or
/// free what `list` showed.
pub(super) fn stored(key: &str) -> Cow<'_, str> {
    if is_raw(key) || is_hashed(key) {
        return Cow::Borrowed(key);
    }
    let mut name = String::with_capacity(HEAD_MAX + MARK.len() + 64);
    name.push_str(head(key));
    name.push_str(MARK);
    for byte in Sha256::digest(key.as_bytes()) {
        let _ = write!(name, "{byte:02x}");
    }
    Cow::Owned(name)
}

/// Whether `key` is kept as it is.
pub(super) fn is_raw(key: &str) -> bool {
    key.len() <= RAW_MAX && !key.contains('\0') && !key.contains(MARK)
}

/// Whether `key` is a row name in the hashed form: a head (no NUL, no
/// [`MARK`], at most [`HEAD_MAX`] bytes), [`MARK`], and 64 lowercase hex
/// digits. Only [`stored`] makes such names, and another key equal to one
/// would have to be found from its SHA-256.
fn is_hashed(key: &str) -> bool {
    let Some((head, hash)) = key.split_once(MARK) else {
        return false;
    };
    head.len() <= HEAD_MAX
        && !head.contains('\0')
        && hash.len() == 64
        && hash.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// What `list(prefix)` asks the table for: names starting with this.
pub(super) fn list_prefix(prefix: &str) -> &str {
    if is_raw(prefix) { prefix } else { head(prefix) }
}

/// Whether the row `name` belongs in `list(prefix)`. A name kept as it is
/// must start with `prefix`; a hashed one, whose head is all that is kept,
/// is listed when its head starts with `prefix`, or when `prefix` goes on
/// past its head (the rest cannot be told).
pub(super) fn listed(name: &str, prefix: &str) -> bool {
    match name.find(MARK) {
        None => name.starts_with(prefix),
        Some(end) => {
            let head = &name[..end];
            head.starts_with(prefix) || prefix.starts_with(head)
        }
    }
}

/// The first bytes of `key`: up to its first NUL or [`MARK`], at most
/// [`HEAD_MAX`] bytes, on a character boundary.
fn head(key: &str) -> &str {
    let mut end = key.find(['\0']).unwrap_or(key.len());
    if let Some(mark) = key.find(MARK) {
        end = end.min(mark);
    }
    end = end.min(HEAD_MAX);
    while !key.is_char_boundary(end) {
        end -= 1;
    }
    &key[..end]
}

/// A `NOTIFY` payload must stay under 8000 bytes; a longer name is announced
/// with an empty payload, which wakes every waiter of the process.
const MAX_PAYLOAD: usize = 7000;

/// What a notification about `key` carries: the name. Waiters know the
/// name, not its row name: a name kept as a hash (or too long to send) is
/// sent as nothing, which wakes every waiter of each process instead. So
/// is a name starting with `+`, which would read as the announcement of a
/// new holder (`+` and the name) of the name after it.
pub(super) fn payload_of(key: &str) -> &str {
    if is_raw(key) && key.len() < MAX_PAYLOAD && !key.starts_with('+') {
        key
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Names that always worked keep their rows; any other name must make a
    // row name PostgreSQL takes, distinct for distinct names, or two locks
    // would be one.
    #[test]
    fn every_name_makes_a_storable_row_name_and_distinct_names_distinct_ones() {
        let long = "x".repeat(RAW_MAX);
        let names = [
            "lock:a".to_owned(),
            "lock:with space\nand ünïcödé".to_owned(),
            long.clone(),
            format!("{long}y"),
            format!("{long}z"),
            "job\0a".to_owned(),
            "job\0b".to_owned(),
            format!("job{MARK}{}", "0".repeat(63)),
            format!("job{MARK}{}", "1".repeat(63)),
            "é".repeat(HEAD_MAX),
        ];
        let stored: std::collections::HashSet<String> =
            names.iter().map(|name| stored(name).into_owned()).collect();
        assert_eq!(stored.len(), names.len(), "one row name per name");
        for name in &stored {
            assert!(!name.contains('\0'), "no NUL: {name:?}");
            assert!(name.len() <= RAW_MAX, "{} bytes", name.len());
        }
        assert_eq!(stored_of("lock:a"), "lock:a", "kept as it is");
        assert_eq!(stored_of(&long), long, "kept as it is up to RAW_MAX");
        assert!(stored_of("job\0a").starts_with(&format!("job{MARK}")));
        let hashed = stored_of(&"é".repeat(HEAD_MAX));
        assert!(hashed.starts_with("é"), "cut on a character boundary");
    }

    // A manager's list asks for its prefix: a hashed name must still be
    // found under it, and a name under another prefix must not.
    #[test]
    fn hashed_names_are_listed_under_the_prefixes_their_heads_keep() {
        let binary = stored_of("app:job\0id");
        assert!(listed(&binary, "app:"));
        assert!(listed(&binary, ""));
        assert!(!listed(&binary, "other:"));
        assert!(listed("app:plain", "app:"));
        assert!(!listed("other:plain", "app:"));
        assert_eq!(list_prefix("app:"), "app:");
        assert_eq!(list_prefix("app\0:"), "app");
        assert!(listed(&binary, list_prefix("app:job\0")));
    }

    // `list` shows a hashed name as its row name; giving that name back
    // (to inspect or free it) must reach the same row, not hash it again.
    #[test]
    fn a_hashed_row_name_names_its_own_row() {
        let hashed = stored_of("app:job\0id");
        assert_eq!(stored_of(&hashed), hashed);
        let long = stored_of(&"z".repeat(RAW_MAX + 1));
        assert_eq!(stored_of(&long), long);
        // Not the hashed form: hashed like any other key holding the mark.
        let forged = format!("job{MARK}{}", "0".repeat(63));
        assert_ne!(stored_of(&forged), forged);
        let upper = format!("job{MARK}{}", "A".repeat(64));
        assert_ne!(stored_of(&upper), upper);
    }

    fn stored_of(key: &str) -> String {
        stored(key).into_owned()
    }

    #[test]
    fn a_name_that_starts_with_a_plus_is_never_sent_as_one() {
        // `+` and a name announce that name's new holder: a release of
        // `+w` sent as `+w` would wake the observers of `w` and none of
        // its own waiters, who would sleep on until its holder's TTL.
        assert_eq!(payload_of("lock:w"), "lock:w");
        assert_eq!(payload_of("+w"), "", "sent as nothing: every waiter wakes");
    }
}
