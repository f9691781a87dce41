//! The etcd keys of one lock name: the writer's, each reader's, and each
//! waiting writer's claim.
//!
//! ```text
//! lock:catalog                          the writer's lease (the plain lock)
//! lock:catalog\0reader\0<token>         one reader's lease, on its own etcd lease
//! lock:catalog\0writer-wait\0<token>    a writer waiting for the readers
//! ```
//!
//! Every companion key is the name followed by a NUL byte, so the name and
//! its companions are the key range `[name, name\x01)`, which holds no
//! other name's keys (names with a NUL byte are refused: see
//! [`check_name`]). One watch of that range hears every release of the
//! name; each kind of companion is a range of its own, which a
//! transaction compares as a whole ("no reader", "no waiting writer").

use crate::{Error, Result};

/// What follows a name in the key of one of its readers, before the token.
const READER: &str = "\0reader\0";
/// What follows a name in the key of a writer's claim, before the token.
const WRITER_WAIT: &str = "\0writer-wait\0";

/// Refuses a name with a NUL byte: its keys would fall among another
/// name's readers and claims.
pub(crate) fn check_name(key: &str) -> Result<()> {
    if key.contains('\0') {
        return Err(Error::InvalidName {
            name: key.to_owned(),
            reason: "etcd keeps a name's readers under the name followed by a NUL byte, \
                     so a name may not contain one; remove it",
        });
    }
    Ok(())
}

/// The key of the reader holding `key` under `token`.
pub(crate) fn reader(key: &str, token: &str) -> String {
    [key, READER, token].concat()
}

/// The key of the claim of the writer waiting for `key` under `token`.
pub(crate) fn claim(key: &str, token: &str) -> String {
    [key, WRITER_WAIT, token].concat()
}

/// The range of keys of every reader of `key`: `(start, end)`.
pub(crate) fn readers(key: &str) -> (String, String) {
    range(key, READER)
}

/// The range of keys of every waiting writer's claim on `key`.
pub(crate) fn claims(key: &str) -> (String, String) {
    range(key, WRITER_WAIT)
}

/// The end of the range holding `key` and every companion of it.
pub(crate) fn companions_end(key: &str) -> String {
    [key, "\u{1}"].concat()
}

/// The end of the range holding `key` and its readers, and no claim: the
/// readers sort before the claims.
pub(crate) fn readers_end(key: &str) -> String {
    readers(key).1
}

/// `[key + kind, key + kind with its last NUL raised to 1)`.
fn range(key: &str, kind: &str) -> (String, String) {
    let start = [key, kind].concat();
    let mut end = start.clone();
    end.pop();
    end.push('\u{1}');
    (start, end)
}

/// What a stored key is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Stored<'a> {
    /// A name's writer (or a key this library did not write).
    Writer(&'a str),
    /// One reader of the name.
    Reader(&'a str),
    /// A waiting writer's claim on the name.
    Claim(&'a str),
}

impl<'a> Stored<'a> {
    /// The name the key belongs to.
    pub(crate) fn name(&self) -> &'a str {
        match *self {
            Stored::Writer(name) | Stored::Reader(name) | Stored::Claim(name) => name,
        }
    }
}

/// Which name `stored` belongs to, and what it is.
pub(crate) fn parse(stored: &str) -> Stored<'_> {
    let Some(at) = stored.find('\0') else {
        return Stored::Writer(stored);
    };
    let (name, rest) = stored.split_at(at);
    if rest.starts_with(READER) {
        Stored::Reader(name)
    } else if rest.starts_with(WRITER_WAIT) {
        Stored::Claim(name)
    } else {
        Stored::Writer(stored)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_names_companions_sort_inside_its_range_and_other_names_outside() {
        let key = "lock:a";
        let end = companions_end(key);
        let inside = [
            key.to_owned(),
            reader(key, "t@h:1"),
            claim(key, "t@h:1"),
        ];
        for stored in &inside {
            assert!(
                stored.as_str() >= key && stored.as_str() < end.as_str(),
                "{stored:?}"
            );
        }
        for other in ["lock:ab", "lock:a:b", "lock:a#permit-1", "lock:"] {
            assert!(
                !(other >= key && other < end.as_str()),
                "{other:?} is another name's key"
            );
        }
        let (start, end) = readers(key);
        assert!(reader(key, "x") > start && reader(key, "x") < end);
        assert!(claim(key, "x") > end, "claims are outside the readers' range");
        assert_eq!(readers_end(key), end);
        let (start, end) = claims(key);
        assert!(claim(key, "x") > start && claim(key, "x") < end);
    }

    #[test]
    fn a_stored_key_says_its_name_and_kind() {
        assert_eq!(parse("lock:a"), Stored::Writer("lock:a"));
        assert_eq!(parse(&reader("lock:a", "t")), Stored::Reader("lock:a"));
        assert_eq!(parse(&claim("lock:a", "t")), Stored::Claim("lock:a"));
        assert!(check_name("lock:a\0b").is_err());
        assert!(check_name("lock:a").is_ok());
    }
}
