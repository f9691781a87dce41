//! Memcached's meta protocol on the wire: commands written with the opaque
//! that ties each reply to its request, reply lines and values read and
//! checked, and the server's version judged.
//!
//! No I/O of its own beyond reading one reply: the [`client`](super::client)
//! decides what to send when, and on which connection.

use std::fmt;
use std::io;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

use super::failure::Failure;

/// The largest value this client reads back: lease values are owner tokens,
/// far smaller; a larger one means the key holds something else.
const MAX_VALUE: usize = 64 * 1024;

/// The longest reply line this client reads: a meta reply's line is a code,
/// a length and a few flags, an error line a sentence. Past it, the
/// connection is out of step (or not talking to memcached), and bytes are
/// not buffered waiting for a line end.
const MAX_LINE: u64 = 8 * 1024;

/// The oldest memcached the store works with. 1.6.10 brought the meta
/// protocol as the store speaks it (`ms <key> <datalen>`, the `b` flag, `HD`
/// replies); 1.6.13 fixed `md <key> C<cas>`, which compared the CAS against
/// zero, so no release ever succeeded before it.
const OLDEST: Version = Version(1, 6, 13);

/// The first memcached whose misses (`EN`) carry the request's opaque;
/// older ones answer a miss with a bare `EN`.
pub(crate) const OPAQUE_MISSES: Version = Version(1, 6, 18);

/// A memcached version, as `VERSION 1.6.18` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Version(u32, u32, u32);

impl Version {
    /// `1.6.18`, `1.6.21-rc1` or `1.6.9 (tuned)`: the leading numbers.
    fn parse(text: &str) -> Option<Version> {
        let word = text.split_whitespace().next()?;
        let mut parts = word.splitn(3, '.').map(|part| {
            let digits = part.len() - part.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            part[..digits].parse::<u32>().ok()
        });
        Some(Version(parts.next()??, parts.next()??, parts.next()??))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// One meta command: its line without the opaque and CRLF (`mg <key> b v
/// c`), and the data block of an `ms`. The client adds `O<n>` to each
/// command it sends and checks that the reply it reads carries the same.
#[derive(Debug)]
pub(crate) struct Command {
    line: String,
    data: Option<Vec<u8>>,
}

impl Command {
    /// A command without a data block (`mg`, `md`).
    pub(crate) fn new(line: String) -> Command {
        Command { line, data: None }
    }

    /// An `ms` with its data block.
    pub(crate) fn with_data(line: String, data: Vec<u8>) -> Command {
        Command {
            line,
            data: Some(data),
        }
    }

    /// Only a get answers `EN`, and before 1.6.18 without the opaque.
    pub(crate) fn is_get(&self) -> bool {
        self.line.starts_with("mg ")
    }

    pub(crate) fn write_to(&self, opaque: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(self.line.as_bytes());
        out.extend_from_slice(format!(" O{opaque}\r\n").as_bytes());
        if let Some(data) = &self.data {
            out.extend_from_slice(data);
            out.extend_from_slice(b"\r\n");
        }
    }
}

/// One meta reply: its two-letter code, its flags, and the value of a `VA`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) code: Code,
    /// The flags after the code, as written (`t12`, `c34`...).
    flags: Vec<Vec<u8>>,
    pub(crate) value: Option<Vec<u8>>,
}

/// The reply codes the store acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Code {
    /// `HD`: done (stored, deleted, found without a value).
    Done,
    /// `VA`: found, with a value.
    Value,
    /// `NS`: not stored (an add found the key taken).
    NotStored,
    /// `EX`: the CAS did not match (somebody changed the item).
    Exists,
    /// `NF`: not found (on a delete or a CAS set).
    NotFound,
    /// `EN`: miss (on a get).
    Miss,
}

impl Reply {
    /// The numeric value of the flag `letter` (`t` for remaining TTL, `c` for
    /// CAS), if the reply carries it.
    pub(crate) fn number(&self, letter: u8) -> Option<i64> {
        self.flag(letter)
            .and_then(|digits| std::str::from_utf8(digits).ok())
            .and_then(|digits| digits.parse().ok())
    }

    /// The token of the flag `letter`, as written.
    fn flag(&self, letter: u8) -> Option<&[u8]> {
        self.flags
            .iter()
            .find(|flag| flag.first() == Some(&letter))
            .map(|flag| &flag[1..])
    }
}

/// The version in the server's answer to `version`, if the store can use
/// it.
pub(crate) fn supported(address: &str, line: &[u8]) -> Result<Version, Failure> {
    let text = String::from_utf8_lossy(line);
    let text = text.trim_end();
    let version = text.strip_prefix("VERSION ").and_then(Version::parse);
    let needs = format!(
        "the store needs memcached {OLDEST} or later (the meta protocol as the store speaks it came in 1.6.10, and compare-and-delete, which every release relies on, works from {OLDEST})"
    );
    match version {
        Some(version) if version >= OLDEST => Ok(version),
        Some(version) => Err(Failure::Unsupported(format!(
            "memcached {version} at {address} is too old: {needs}; upgrade memcached"
        ))),
        None => Err(Failure::Unsupported(format!(
            "the server at {address} answered `version` with {:?}, not a memcached version: {needs}",
            quoted(text)
        ))),
    }
}

/// At most the first [`QUOTED`] characters of what a server sent, for an
/// error: a reply of any length must not become an error message of that
/// length.
fn quoted(text: &str) -> String {
    match text.char_indices().nth(QUOTED) {
        Some((end, _)) => format!("{}...", &text[..end]),
        None => text.to_owned(),
    }
}

/// See [`quoted`].
const QUOTED: usize = 80;

/// Whether `reply` answers the command sent with `opaque`.
pub(crate) fn answers(
    reply: &Reply,
    opaque: u64,
    is_get: bool,
    misses_carry_opaque: bool,
) -> Result<(), Failure> {
    let wanted = opaque.to_string();
    match reply.flag(b'O') {
        Some(token) if token == wanted.as_bytes() => Ok(()),
        // Before 1.6.18 a miss does not echo the opaque; only a get misses.
        None if reply.code == Code::Miss && is_get && !misses_carry_opaque => Ok(()),
        Some(token) => Err(Failure::OutOfStep(format!(
            "a {:?} reply for request O{} arrived where request O{wanted} was answered",
            reply.code,
            String::from_utf8_lossy(token)
        ))),
        None => Err(Failure::OutOfStep(format!(
            "a {:?} reply without an opaque arrived where request O{wanted} was answered",
            reply.code
        ))),
    }
}

/// Reads one line of a reply into `line` (cleared first), its end
/// included: `Ok(0)` at the end of the stream, an error for a line longer
/// than [`MAX_LINE`] (a server, or anything on the path, sending bytes
/// without a line end must not make the client buffer all of them).
pub(crate) async fn read_line(
    reader: &mut BufReader<impl AsyncRead + Unpin>,
    line: &mut Vec<u8>,
) -> io::Result<usize> {
    line.clear();
    let read = (&mut *reader)
        .take(MAX_LINE)
        .read_until(b'\n', line)
        .await?;
    if !line.ends_with(b"\n") && read as u64 == MAX_LINE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a reply line longer than {MAX_LINE} bytes"),
        ));
    }
    Ok(read)
}

/// Reads one reply. The outer error is the connection's (it must be closed);
/// the inner one an error line from the server.
pub(crate) async fn read_reply(
    reader: &mut BufReader<impl AsyncRead + Unpin>,
    line: &mut Vec<u8>,
) -> io::Result<Result<Reply, String>> {
    let read = read_line(reader, line).await?;
    if read == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "memcached closed the connection",
        ));
    }
    let text = line
        .strip_suffix(b"\r\n")
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a reply without CRLF"))?;
    let (reply, length) = match parse_line(text) {
        Ok(parsed) => parsed,
        Err(message) => return Ok(Err(message)),
    };
    let Some(length) = length else {
        return Ok(Ok(reply));
    };
    if length > MAX_VALUE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a {length}-byte value is not a lease"),
        ));
    }
    let mut value = vec![0u8; length + 2];
    reader.read_exact(&mut value).await?;
    if !value.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a value without CRLF",
        ));
    }
    value.truncate(length);
    Ok(Ok(Reply {
        value: Some(value),
        ..reply
    }))
}

/// Parses a reply line (without its CRLF): the reply, and the length of the
/// value that follows a `VA`; an error line as the error's text.
fn parse_line(text: &[u8]) -> Result<(Reply, Option<usize>), String> {
    let mut words = text.split(|&b| b == b' ').filter(|word| !word.is_empty());
    let code = words.next().unwrap_or_default();
    let shown = || String::from_utf8_lossy(text).into_owned();
    let (code, length) = match code {
        b"HD" => (Code::Done, None),
        b"NS" => (Code::NotStored, None),
        b"EX" => (Code::Exists, None),
        b"NF" => (Code::NotFound, None),
        b"EN" => (Code::Miss, None),
        b"VA" => {
            let length = words
                .next()
                .and_then(|word| std::str::from_utf8(word).ok())
                .and_then(|digits| digits.parse::<usize>().ok())
                .ok_or_else(shown)?;
            (Code::Value, Some(length))
        }
        _ => return Err(shown()),
    };
    let flags = words.map(<[u8]>::to_vec).collect();
    Ok((
        Reply {
            code,
            flags,
            value: None,
        },
        length,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reply_lines_are_read_with_their_flags() {
        let (reply, length) = parse_line(b"VA 5 t3 c17").expect("a value");
        assert_eq!(reply.code, Code::Value);
        assert_eq!(length, Some(5), "the value's length");
        assert_eq!(reply.number(b't'), Some(3), "remaining ttl");
        assert_eq!(reply.number(b'c'), Some(17), "cas");
        let (reply, _) = parse_line(b"HD t-1").expect("done");
        assert_eq!(reply.number(b't'), Some(-1), "no expiry");
        assert_eq!(parse_line(b"NS").expect("ns").0.code, Code::NotStored);
        assert_eq!(parse_line(b"EN").expect("en").0.code, Code::Miss);
    }

    // An error line is the server's answer to one command, not a broken
    // stream; a reply this client does not know is reported as such.
    #[test]
    fn error_lines_are_errors_with_their_text() {
        assert_eq!(
            parse_line(b"CLIENT_ERROR bad data chunk").map(|_| ()),
            Err("CLIENT_ERROR bad data chunk".to_owned())
        );
        assert!(parse_line(b"VA x").is_err(), "a VA needs a length");
    }

    // The version decides whether the store may run at all: an old server
    // must be refused by number, whatever follows the number.
    #[test]
    fn versions_are_read_and_old_ones_refused_with_what_is_needed() {
        assert_eq!(Version::parse("1.6.18"), Some(Version(1, 6, 18)));
        assert_eq!(Version::parse("1.6.21-rc1 x"), Some(Version(1, 6, 21)));
        assert_eq!(Version::parse("1.6"), None, "three numbers");
        assert_eq!(Version::parse("x.y.z"), None);
        assert!(Version(1, 6, 10) < OLDEST && OLDEST <= Version(1, 10, 0));
        let ok = supported("h:1", b"VERSION 1.6.18\r\n").map_err(|e| e.to_string());
        assert_eq!(ok, Ok(Version(1, 6, 18)));
        for line in [
            &b"VERSION 1.6.9\r\n"[..],
            b"VERSION 1.6.12\r\n",
            b"ERROR\r\n",
        ] {
            let refused = supported("h:1", line).expect_err("refused").to_string();
            assert!(refused.contains("1.6.13 or later"), "{refused}");
        }
    }

    // A reply line is read into memory whole: a server (or anything on
    // the path) that sends bytes without a line end must not make the
    // client buffer all it sends until the timeout. Found while writing
    // the memcached fuzz target's "no unbounded allocation" property,
    // which its inputs (4 KiB at most) cannot reach.
    #[tokio::test]
    async fn a_reply_line_without_an_end_is_refused_past_its_bound() {
        let endless = vec![b'H'; 1 << 20];
        let mut reader = BufReader::new(&endless[..]);
        let mut line = Vec::new();
        let read = read_reply(&mut reader, &mut line).await;
        let error = read.expect_err("a line with no end is no reply");
        assert_eq!(error.kind(), io::ErrorKind::InvalidData, "{error}");
        assert!(
            line.len() <= 8 * 1024,
            "{} bytes of one line were buffered",
            line.len()
        );
    }

    // A reply is its request's only when it carries the request's opaque;
    // the one exception is a miss from a server that does not echo it.
    #[test]
    fn a_reply_answers_only_the_request_whose_opaque_it_carries() {
        let reply = |text: &[u8]| parse_line(text).expect("a reply").0;
        assert!(answers(&reply(b"HD O7"), 7, false, true).is_ok());
        assert!(
            answers(&reply(b"HD O6"), 7, false, true).is_err(),
            "another's"
        );
        assert!(answers(&reply(b"HD"), 7, false, false).is_err(), "none");
        assert!(answers(&reply(b"EN"), 7, true, false).is_ok(), "old miss");
        assert!(
            answers(&reply(b"EN"), 7, true, true).is_err(),
            "1.6.18 echoes"
        );
        assert!(
            answers(&reply(b"EN"), 7, false, false).is_err(),
            "not a get"
        );
    }
}
