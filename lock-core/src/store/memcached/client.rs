//! A minimal client for memcached's meta protocol (memcached 1.6.13 and
//! later).
//!
//! Why not a client crate: the store needs (1) meta commands with exact
//! flags (`ms ... ME` for add, `C<cas>` for compare-and-swap and
//! compare-and-delete, `t`/`c`/`v` for TTL, CAS and value, `b` for binary
//! keys, `O` to match replies to requests), (2) two commands pipelined in
//! one round trip (an acquire and the holder's remaining TTL), (3) requests
//! on one key kept in order on one connection even when a caller gives up on
//! its reply (so the runtime's give-back of a dropped acquire cannot
//! overtake it), (4) writes pinned to the connection their CAS was read on,
//! and (5) the shared per-call deadline. The async memcached crates
//! available pass only some meta flags through, and none keeps a request
//! running after its caller drops it; what is needed fits in this file.
//!
//! Each connection is served by a task of its own. Callers queue requests
//! (commands, and optionally the session they must be sent on) and await a
//! reply channel; the task writes every queued request, then reads their
//! replies in order, so concurrent callers share a connection in pipelined
//! batches. A caller that is dropped or times out leaves its request to
//! finish; its reply is discarded.
//!
//! Replies are matched to requests, never just counted: every command is
//! sent with an opaque number (`O<n>`) the server copies into its reply, and
//! a reply that carries another number (or none) means the connection is out
//! of step: its batch fails and the connection is closed. A connection that
//! fails, stays silent past the timeout, or answers with an error line
//! (which carries no opaque) is closed, its waiting callers get an error,
//! and the next request connects again, after asking the server's version:
//! a memcached older than 1.6.13 is refused with a message that says so.

use std::fmt;
use std::io;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

/// The most requests one batch writes before reading replies.
const BATCH: usize = 64;

/// How many requests may wait for a connection's task.
const QUEUE: usize = 1024;

/// The largest value this client reads back: lease values are owner tokens,
/// far smaller; a larger one means the key holds something else.
const MAX_VALUE: usize = 64 * 1024;

/// The oldest memcached the store works with. 1.6.10 brought the meta
/// protocol as the store speaks it (`ms <key> <datalen>`, the `b` flag, `HD`
/// replies); 1.6.13 fixed `md <key> C<cas>`, which compared the CAS against
/// zero, so no release ever succeeded before it.
const OLDEST: Version = Version(1, 6, 13);

/// The first memcached whose misses (`EN`) carry the request's opaque;
/// older ones answer a miss with a bare `EN`.
const OPAQUE_MISSES: Version = Version(1, 6, 18);

/// A memcached version, as `VERSION 1.6.18` gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Version(u32, u32, u32);

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
pub(super) struct Command {
    line: String,
    data: Option<Vec<u8>>,
}

impl Command {
    /// A command without a data block (`mg`, `md`).
    pub(super) fn new(line: String) -> Command {
        Command { line, data: None }
    }

    /// An `ms` with its data block.
    pub(super) fn with_data(line: String, data: Vec<u8>) -> Command {
        Command {
            line,
            data: Some(data),
        }
    }

    /// Only a get answers `EN`, and before 1.6.18 without the opaque.
    fn is_get(&self) -> bool {
        self.line.starts_with("mg ")
    }

    fn write_to(&self, opaque: u64, out: &mut Vec<u8>) {
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
pub(super) struct Reply {
    pub(super) code: Code,
    /// The flags after the code, as written (`t12`, `c34`...).
    flags: Vec<Vec<u8>>,
    pub(super) value: Option<Vec<u8>>,
}

/// The reply codes the store acts on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Code {
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
    pub(super) fn number(&self, letter: u8) -> Option<i64> {
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

/// Which TCP connection answered a request. Memcached's CAS values are
/// unique only for the life of one server process (its counter starts again
/// at a restart), and one TCP connection reaches one process: a CAS read on
/// a session may be used for a write only on that same session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Session(u64);

/// A request's replies, and the session that gave them.
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) replies: Vec<Reply>,
    pub(super) session: Session,
}

/// A request's failure: the connection's, or the server's answer.
#[derive(Debug)]
pub(super) enum Failure {
    Io(io::Error),
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`, or an unreadable
    /// reply.
    Protocol(String),
    /// The server is not a memcached the store can use (too old, or it
    /// would not say its version): the whole message.
    Unsupported(String),
    /// A reply that does not answer the request it was read for: the
    /// connection is out of step, and was closed. The request's outcome is
    /// unknown.
    OutOfStep(String),
    /// The request was for a session that has since been closed; it was not
    /// sent.
    Reopened,
    /// The connection's task is gone (the store was dropped).
    Closed,
}

impl Failure {
    /// The same failure, for another request of the batch.
    fn again(&self) -> Failure {
        match self {
            Failure::Io(e) => Failure::Io(io::Error::new(e.kind(), e.to_string())),
            Failure::Protocol(line) => Failure::Protocol(line.clone()),
            Failure::Unsupported(why) => Failure::Unsupported(why.clone()),
            Failure::OutOfStep(why) => Failure::OutOfStep(why.clone()),
            Failure::Reopened => Failure::Reopened,
            Failure::Closed => Failure::Closed,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Io(e) => write!(f, "memcached connection: {e}"),
            Failure::Protocol(line) => write!(f, "memcached answered {line:?}"),
            Failure::Unsupported(why) => f.write_str(why),
            Failure::OutOfStep(why) => write!(
                f,
                "the memcached connection was out of step ({why}): it was closed, and the next call opens a new one; whether this call took effect is unknown"
            ),
            Failure::Reopened => f.write_str(
                "the memcached connection was reopened after the read this write depends on",
            ),
            Failure::Closed => f.write_str("the memcached connection was closed"),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Failure::Io(e) => Some(e),
            _ => None,
        }
    }
}

struct Request {
    commands: Vec<Command>,
    /// Send only on this session (the one a CAS was read on).
    pin: Option<Session>,
    answer: oneshot::Sender<Result<Answer, Failure>>,
}

impl Request {
    fn fail(self, failure: Failure) {
        let _ = self.answer.send(Err(failure));
    }
}

/// One server connection, served by its own task.
#[derive(Clone)]
pub(super) struct Connection {
    queue: mpsc::Sender<Request>,
}

impl Connection {
    /// A connection to `address` (`host:port`), opened on first use.
    /// `timeout` bounds connecting and each batch's replies.
    pub(super) fn new(address: String, timeout: Duration) -> Connection {
        let (queue, requests) = mpsc::channel(QUEUE);
        tokio::spawn(serve(address, timeout, requests));
        Connection { queue }
    }

    /// Sends `commands` and returns their replies, one each, in order, with
    /// the session that answered. With `pin`, the commands are sent only on
    /// that session: if it has been closed since, the call fails with
    /// [`Failure::Reopened`] and nothing is sent.
    ///
    /// Dropping the returned future does not cancel the request: it is still
    /// sent, in order, and its replies read.
    pub(super) async fn call(
        &self,
        commands: Vec<Command>,
        pin: Option<Session>,
    ) -> Result<Answer, Failure> {
        let (answer, answered) = oneshot::channel();
        let request = Request {
            commands,
            pin,
            answer,
        };
        self.queue
            .send(request)
            .await
            .map_err(|_| Failure::Closed)?;
        answered.await.map_err(|_| Failure::Closed)?
    }
}

/// An open connection: its two halves, its session, and what its server
/// echoes.
struct Link {
    reader: BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: BufWriter<tokio::net::tcp::OwnedWriteHalf>,
    session: Session,
    /// Whether a miss (`EN`) carries the opaque (memcached 1.6.18 and later).
    misses_carry_opaque: bool,
}

/// A connection's task: batches queued requests, writes them, reads their
/// replies, and reconnects on the next request after a failure.
async fn serve(address: String, timeout: Duration, mut requests: mpsc::Receiver<Request>) {
    let mut link: Option<Link> = None;
    let mut sessions = 0;
    // Opaques count up over every connection this task opens.
    let mut opaque = 0;
    let mut batch = Vec::with_capacity(BATCH);
    while requests.recv_many(&mut batch, BATCH).await > 0 {
        let open = match link.as_mut() {
            Some(open) => open,
            None => {
                sessions += 1;
                match connect(&address, timeout, Session(sessions)).await {
                    Ok(opened) => link.insert(opened),
                    Err(failure) => {
                        fail(&mut batch, &failure);
                        continue;
                    }
                }
            }
        };
        // A write under a CAS read on an earlier connection may reach a
        // restarted server, where the same CAS names another item.
        let session = open.session;
        let mut index = 0;
        while index < batch.len() {
            if batch[index].pin.is_some_and(|pin| pin != session) {
                batch.remove(index).fail(Failure::Reopened);
            } else {
                index += 1;
            }
        }
        if batch.is_empty() {
            continue;
        }
        let exchanged =
            tokio::time::timeout(timeout, exchange(open, &mut batch, &mut opaque)).await;
        let failure = match exchanged {
            Ok(Ok(Step::InStep)) => continue,
            Ok(Ok(Step::Doubtful)) => {
                // Every request was answered, but an error line carries no
                // opaque to check: the connection is not trusted further.
                link = None;
                continue;
            }
            Ok(Err(failure)) => failure,
            Err(_) => Failure::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no reply within {timeout:?}; the connection was closed"),
            )),
        };
        fail(&mut batch, &failure);
        link = None;
    }
}

/// Connects, and asks the server its version: a memcached the store cannot
/// use is refused here, on every connection (a server may be replaced by
/// another between two).
async fn connect(address: &str, timeout: Duration, session: Session) -> Result<Link, Failure> {
    let opened = tokio::time::timeout(timeout, async {
        let stream = TcpStream::connect(address).await.map_err(Failure::Io)?;
        stream.set_nodelay(true).map_err(Failure::Io)?;
        let (read, write) = stream.into_split();
        let (mut reader, mut writer) = (BufReader::new(read), BufWriter::new(write));
        writer
            .write_all(b"version\r\n")
            .await
            .map_err(Failure::Io)?;
        writer.flush().await.map_err(Failure::Io)?;
        let mut line = Vec::with_capacity(32);
        reader
            .read_until(b'\n', &mut line)
            .await
            .map_err(Failure::Io)?;
        let version = supported(address, &line)?;
        keeps_cas(address, &mut reader, &mut writer).await?;
        Ok(Link {
            reader,
            writer,
            session,
            misses_carry_opaque: version >= OPAQUE_MISSES,
        })
    })
    .await;
    opened.unwrap_or_else(|_| {
        Err(Failure::Io(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("could not connect to {address} within {timeout:?}"),
        )))
    })
}

/// Refuses a memcached started with `-C` (`--disable-cas`), from its
/// `stats settings`: it gives every item CAS 0, so no release or extend
/// could tell a lease from the next holder's. Refused at connect, before
/// any lease is taken that could then never be given back.
async fn keeps_cas(
    address: &str,
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: &mut BufWriter<tokio::net::tcp::OwnedWriteHalf>,
) -> Result<(), Failure> {
    writer
        .write_all(b"stats settings\r\n")
        .await
        .map_err(Failure::Io)?;
    writer.flush().await.map_err(Failure::Io)?;
    let mut cas_enabled = None;
    let mut line = Vec::with_capacity(64);
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .await
            .map_err(Failure::Io)?;
        if read == 0 {
            return Err(Failure::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection during `stats settings`",
            )));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end();
        if text == "END" {
            break;
        }
        if let Some(value) = text.strip_prefix("STAT cas_enabled ") {
            cas_enabled = Some(value == "yes");
        }
    }
    match cas_enabled {
        Some(false) => Err(Failure::Unsupported(format!(
            "memcached at {address} keeps no CAS values (it runs with -C or --disable-cas), so a release or extend could not tell a lease from the next holder's; run memcached without -C"
        ))),
        _ => Ok(()),
    }
}

/// The version in the server's answer to `version`, if the store can use
/// it.
fn supported(address: &str, line: &[u8]) -> Result<Version, Failure> {
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
            "the server at {address} answered `version` with {text:?}, not a memcached version: {needs}"
        ))),
    }
}

/// Every request still in `batch` fails with `failure`.
fn fail(batch: &mut Vec<Request>, failure: &Failure) {
    for request in batch.drain(..) {
        request.fail(failure.again());
    }
}

/// How a batch ended, when every request in it was answered.
enum Step {
    /// Every reply carried its request's opaque.
    InStep,
    /// The server answered some command with an error line, which carries
    /// no opaque: nothing after it can be trusted to be in step.
    Doubtful,
}

/// Writes every request of `batch`, each command with an opaque of its own,
/// then reads and hands out their replies in order, draining `batch` as it
/// goes. A reply whose opaque is not its command's ends the batch with
/// [`Failure::OutOfStep`]: the requests left in `batch` are the caller's to
/// fail.
async fn exchange(
    link: &mut Link,
    batch: &mut Vec<Request>,
    opaque: &mut u64,
) -> Result<Step, Failure> {
    let mut bytes = Vec::new();
    let mut expected = Vec::with_capacity(batch.len());
    for request in batch.iter() {
        let mut opaques = Vec::with_capacity(request.commands.len());
        for command in &request.commands {
            *opaque += 1;
            command.write_to(*opaque, &mut bytes);
            opaques.push((*opaque, command.is_get()));
        }
        expected.push(opaques);
    }
    link.writer.write_all(&bytes).await.map_err(Failure::Io)?;
    link.writer.flush().await.map_err(Failure::Io)?;
    let mut line = Vec::with_capacity(64);
    let mut step = Step::InStep;
    for opaques in expected {
        let mut replies = Vec::with_capacity(opaques.len());
        let mut failed = None;
        for (opaque, is_get) in opaques {
            match read_reply(&mut link.reader, &mut line)
                .await
                .map_err(Failure::Io)?
            {
                Ok(reply) => {
                    answers(&reply, opaque, is_get, link.misses_carry_opaque)?;
                    replies.push(reply);
                }
                Err(message) => {
                    // The server's answer to this command, most likely; as it
                    // cannot be checked, the connection is closed after the
                    // batch, and every reply until then is still checked.
                    step = Step::Doubtful;
                    failed.get_or_insert(message);
                }
            }
        }
        // Answered: out of the batch, so that a later failure does not
        // answer it twice.
        let request = batch.remove(0);
        let answer = match failed {
            Some(message) => Err(Failure::Protocol(message)),
            None => Ok(Answer {
                replies,
                session: link.session,
            }),
        };
        let _ = request.answer.send(answer);
    }
    Ok(step)
}

/// Whether `reply` answers the command sent with `opaque`.
fn answers(
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

/// Reads one reply. The outer error is the connection's (it must be closed);
/// the inner one an error line from the server.
async fn read_reply(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    line: &mut Vec<u8>,
) -> io::Result<Result<Reply, String>> {
    line.clear();
    let read = reader.read_until(b'\n', line).await?;
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
