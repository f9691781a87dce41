//! A minimal client for memcached's meta protocol (memcached 1.6 and later).
//!
//! Why not a client crate: the store needs (1) meta commands with exact
//! flags (`ms ... ME` for add, `C<cas>` for compare-and-swap and
//! compare-and-delete, `t`/`c`/`v` for TTL, CAS and value, `b` for binary
//! keys), (2) two commands pipelined in one round trip (an acquire and the
//! holder's remaining TTL), (3) requests on one key kept in order on one
//! connection even when a caller gives up on its reply (so the runtime's
//! give-back of a dropped acquire cannot overtake it), and (4) the shared
//! per-call deadline. The async memcached crates available pass only some
//! meta flags through, and none keeps a request running after its caller
//! drops it; what is needed fits in this file.
//!
//! Each connection is served by a task of its own. Callers queue requests
//! (bytes to send, how many replies to read) and await a reply channel; the
//! task writes every queued request, then reads their replies in order, so
//! concurrent callers share a connection in pipelined batches. A caller that
//! is dropped or times out leaves its request to finish; its reply is
//! discarded. A connection that fails or stays silent past the timeout is
//! closed, its waiting callers get an error, and the next request connects
//! again.

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
        self.flags
            .iter()
            .find(|flag| flag.first() == Some(&letter))
            .and_then(|flag| std::str::from_utf8(&flag[1..]).ok())
            .and_then(|digits| digits.parse().ok())
    }
}

/// A request's failure: the connection's, or the server's answer.
#[derive(Debug)]
pub(super) enum Failure {
    Io(io::Error),
    /// `ERROR`, `CLIENT_ERROR ...` or `SERVER_ERROR ...`, or an unreadable
    /// reply.
    Protocol(String),
    /// The connection's task is gone (the store was dropped).
    Closed,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Io(e) => write!(f, "memcached connection: {e}"),
            Failure::Protocol(line) => write!(f, "memcached answered {line:?}"),
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
    bytes: Vec<u8>,
    replies: usize,
    answer: oneshot::Sender<Result<Vec<Reply>, Failure>>,
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

    /// Sends `bytes` (one or more commands) and returns the `replies`
    /// replies they produce, in order. Dropping the returned future does not
    /// cancel the request: it is still sent, in order, and its replies read.
    pub(super) async fn call(&self, bytes: Vec<u8>, replies: usize) -> Result<Vec<Reply>, Failure> {
        let (answer, answered) = oneshot::channel();
        let request = Request {
            bytes,
            replies,
            answer,
        };
        self.queue
            .send(request)
            .await
            .map_err(|_| Failure::Closed)?;
        answered.await.map_err(|_| Failure::Closed)?
    }
}

type Stream = (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    BufWriter<tokio::net::tcp::OwnedWriteHalf>,
);

/// A connection's task: batches queued requests, writes them, reads their
/// replies, and reconnects on the next request after a failure.
async fn serve(address: String, timeout: Duration, mut requests: mpsc::Receiver<Request>) {
    let mut stream: Option<Stream> = None;
    let mut batch = Vec::with_capacity(BATCH);
    while requests.recv_many(&mut batch, BATCH).await > 0 {
        if stream.is_none() {
            match connect(&address, timeout).await {
                Ok(connected) => stream = Some(connected),
                Err(error) => {
                    fail(&mut batch, &error);
                    continue;
                }
            }
        }
        let Some((reader, writer)) = stream.as_mut() else {
            continue;
        };
        let exchanged = tokio::time::timeout(timeout, exchange(reader, writer, &mut batch)).await;
        match exchanged {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                fail(&mut batch, &error);
                stream = None;
            }
            Err(_) => {
                let error = io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("no reply within {timeout:?}; the connection was closed"),
                );
                fail(&mut batch, &error);
                stream = None;
            }
        }
    }
}

async fn connect(address: &str, timeout: Duration) -> io::Result<Stream> {
    let stream = tokio::time::timeout(timeout, TcpStream::connect(address))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("could not connect to {address} within {timeout:?}"),
            )
        })??;
    stream.set_nodelay(true)?;
    let (read, write) = stream.into_split();
    Ok((BufReader::new(read), BufWriter::new(write)))
}

/// Every request still in `batch` fails with `error`.
fn fail(batch: &mut Vec<Request>, error: &io::Error) {
    for request in batch.drain(..) {
        let _ = request.answer.send(Err(Failure::Io(io::Error::new(
            error.kind(),
            error.to_string(),
        ))));
    }
}

/// Writes every request of `batch`, then reads and hands out their replies
/// in order, draining `batch` as it goes.
async fn exchange(
    reader: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    writer: &mut BufWriter<tokio::net::tcp::OwnedWriteHalf>,
    batch: &mut Vec<Request>,
) -> io::Result<()> {
    for request in batch.iter() {
        writer.write_all(&request.bytes).await?;
    }
    writer.flush().await?;
    let mut line = Vec::with_capacity(64);
    while !batch.is_empty() {
        let request = batch.remove(0);
        let mut replies = Vec::with_capacity(request.replies);
        let mut failed = None;
        for _ in 0..request.replies {
            match read_reply(reader, &mut line).await? {
                Ok(reply) => replies.push(reply),
                Err(message) => {
                    // The server answered this command with an error line;
                    // the stream stays in step, so read on.
                    failed.get_or_insert(message);
                }
            }
        }
        let answer = match failed {
            Some(message) => Err(Failure::Protocol(message)),
            None => Ok(replies),
        };
        let _ = request.answer.send(answer);
    }
    Ok(())
}

/// Reads one reply. The outer error is the connection's (it must be closed);
/// the inner one an error line from the server, after which the stream is
/// still in step.
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
}
