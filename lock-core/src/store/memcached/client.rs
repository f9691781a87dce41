//! A minimal client for memcached's meta protocol (memcached 1.6.13 and
//! later): its connections, each served by a task that pipelines callers'
//! requests and reconnects after a failure. The commands and replies on
//! the wire are in [`protocol`](super::protocol).
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
//! running after its caller drops it; what is needed fits in this file and
//! [`protocol`](super::protocol).
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

use std::io;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot};

use super::dial::{Dialer, Reader, Writer};
use super::failure::Failure;
use super::protocol::{Command, OPAQUE_MISSES, Reply, answers, read_line, read_reply, supported};

/// The most requests one batch writes before reading replies.
const BATCH: usize = 64;

/// How many requests may wait for a connection's task.
const QUEUE: usize = 1024;

/// Which TCP connection answered a request. Memcached's CAS values are
/// unique only for the life of one server process (its counter starts again
/// at a restart), and one TCP connection reaches one process: a CAS read on
/// a session may be used for a write only on that same session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Session(u64);

/// A request's replies, and the session that gave them.
#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) replies: Vec<Reply>,
    pub(crate) session: Session,
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
    /// A connection to the server `dialer` reaches, opened on first use.
    /// `timeout` bounds connecting and each batch's replies.
    pub(super) fn new(dialer: Dialer, timeout: Duration) -> Connection {
        let (queue, requests) = mpsc::channel(QUEUE);
        tokio::spawn(serve(dialer, timeout, requests));
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

/// An open connection (TCP, or TLS over it): its two halves, its session,
/// and what its server echoes.
struct Link {
    reader: Reader,
    writer: Writer,
    session: Session,
    /// Whether a miss (`EN`) carries the opaque (memcached 1.6.18 and later).
    misses_carry_opaque: bool,
}

/// A connection's task: batches queued requests, writes them, reads their
/// replies, and reconnects on the next request after a failure.
async fn serve(dialer: Dialer, timeout: Duration, mut requests: mpsc::Receiver<Request>) {
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
                match connect(&dialer, timeout, Session(sessions)).await {
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

/// Connects (through the TLS handshake, for TLS), and asks the server its
/// version: a memcached the store cannot use is refused here, on every
/// connection (a server may be replaced by another between two). A TLS
/// failure is told with what to do about it, whether it comes in the
/// handshake or on the first reply (with TLS 1.3 a server that wanted a
/// client certificate says so only after the handshake), and so is a plain
/// connection that a TLS-only server drops.
async fn connect(dialer: &Dialer, timeout: Duration, session: Session) -> Result<Link, Failure> {
    let address = dialer.address();
    let opened = tokio::time::timeout(timeout, async {
        let (mut reader, mut writer) = dialer.open().await.map_err(Failure::Io)?;
        writer
            .write_all(b"version\r\n")
            .await
            .map_err(Failure::Io)?;
        writer.flush().await.map_err(Failure::Io)?;
        let mut line = Vec::with_capacity(32);
        let read = read_line(&mut reader, &mut line)
            .await
            .map_err(Failure::Io)?;
        if read == 0 {
            return Err(Failure::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("memcached at {address} closed the connection before answering `version`"),
            )));
        }
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
    opened
        .unwrap_or_else(|_| {
            Err(Failure::Io(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("could not connect to {address} within {timeout:?}"),
            )))
        })
        .map_err(|failure| dialer.explained(failure))
}

/// The most lines `stats settings` is read for: memcached 1.6 sends about
/// 70.
const MAX_SETTINGS: usize = 1_000;

/// Refuses a memcached started with `-C` (`--disable-cas`), from its
/// `stats settings`: it gives every item CAS 0, so no release or extend
/// could tell a lease from the next holder's. Refused at connect, before
/// any lease is taken that could then never be given back.
async fn keeps_cas(
    address: &str,
    reader: &mut Reader,
    writer: &mut Writer,
) -> Result<(), Failure> {
    writer
        .write_all(b"stats settings\r\n")
        .await
        .map_err(Failure::Io)?;
    writer.flush().await.map_err(Failure::Io)?;
    let mut cas_enabled = None;
    let mut line = Vec::with_capacity(64);
    for read_so_far in 0.. {
        if read_so_far == MAX_SETTINGS {
            return Err(Failure::Io(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "`stats settings` went on for over {MAX_SETTINGS} lines without its END: not a memcached the store can use"
                ),
            )));
        }
        let read = read_line(reader, &mut line)
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

/// Runs one batch through [`exchange`] as a connection's task would, the
/// server's side being `replies` (its bytes as read) and a sink: the
/// requests' commands are sent with opaques counted on from `opaque`.
/// Returns how the batch ended (`Ok(true)` when every reply was checked)
/// and each request's answer, `None` for a request left unanswered (whose
/// caller the task fails). For the fuzz targets and their bounded run in
/// the unit tests ([`crate::fuzzing`]).
#[cfg(any(test, feature = "__fuzz"))]
pub(crate) async fn exchange_over(
    replies: Box<dyn tokio::io::AsyncRead + Send + Unpin>,
    requests: Vec<Vec<Command>>,
    misses_carry_opaque: bool,
    mut opaque: u64,
) -> (Result<bool, Failure>, Vec<Option<Result<Answer, Failure>>>) {
    let sink: Box<dyn tokio::io::AsyncWrite + Send + Unpin> = Box::new(tokio::io::sink());
    let mut link = Link {
        reader: tokio::io::BufReader::new(replies),
        writer: tokio::io::BufWriter::new(sink),
        session: Session(1),
        misses_carry_opaque,
    };
    let mut answered = Vec::with_capacity(requests.len());
    let mut batch = Vec::with_capacity(requests.len());
    for commands in requests {
        let (answer, receiver) = oneshot::channel();
        batch.push(Request {
            commands,
            pin: None,
            answer,
        });
        answered.push(receiver);
    }
    let ended = exchange(&mut link, &mut batch, &mut opaque)
        .await
        .map(|step| matches!(step, Step::InStep));
    // What is left was not answered: its senders go, as the task's would.
    drop(batch);
    let answers = answered
        .into_iter()
        .map(|mut receiver| receiver.try_recv().ok())
        .collect();
    (ended, answers)
}
