//! Memcached's replies, as the store's connection task reads them.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

use super::{Input, run_ready};
use crate::store::memcached::client::{Answer, exchange_over};
use crate::store::memcached::failure::Failure;
use crate::store::memcached::protocol::{Code, Command, Reply, supported};

/// A server's bytes, handed over in pieces of the sizes the input chose
/// (each read gets the next piece, or less if the buffer is smaller).
struct Pieces {
    bytes: Vec<u8>,
    at: usize,
    sizes: Vec<usize>,
}

impl AsyncRead for Pieces {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let size = match self.sizes.len() {
            0 => usize::MAX,
            n => self.sizes[self.at % n],
        };
        let start = self.at.min(self.bytes.len());
        let end = start
            .saturating_add(size.max(1))
            .min(self.bytes.len())
            .min(start + buf.remaining());
        buf.put_slice(&self.bytes[start..end]);
        self.at = end;
        Poll::Ready(Ok(()))
    }
}

/// One reply the server side writes, in the structured cases.
#[derive(Clone, Copy, Debug)]
enum Sent {
    /// `HD` with the request's opaque, other flags around it.
    Done,
    /// `VA` with a value of this many bytes and the request's opaque.
    Value(usize),
    /// A reply with another request's opaque (or the right one with a
    /// leading zero, which is another token).
    Wrong,
    /// `HD` without an opaque.
    Bare,
    /// `EN` without an opaque (memcached before 1.6.18).
    BareMiss,
    /// An error line: `SERVER_ERROR ...`.
    ErrorLine,
    /// The connection ends in the middle of this reply.
    Cut,
}

/// What the model says a request gets.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    /// Its replies: each code and value.
    Replies(Vec<(Code, Option<Vec<u8>>)>),
    /// The server's error line.
    Protocol,
    /// Nothing: the batch ended before it (the task fails its caller).
    Unanswered,
}

/// Replies from a memcached (or anything on the path) to a batch of
/// requests, read by the connection task's own reader and matcher: no
/// panic, no wait with every byte at hand, whatever the bytes and however
/// they are split; every reply handed to a request carries that request's
/// opaque (or is a bare miss a get may get from a memcached before
/// 1.6.18); in the structured cases, each request gets exactly what the
/// server sent for it, and none after a reply out of step.
pub fn check_memcached_replies(data: &[u8]) {
    let mut input = Input::new(data);
    let structured = input.below(4) != 0;
    let misses_carry_opaque = input.below(2) == 0;
    let first = u64::from(input.number());
    let mut requests = Vec::new();
    for _ in 0..1 + input.below(4) {
        let mut commands = Vec::new();
        for _ in 0..1 + input.below(3) {
            commands.push(match input.below(3) {
                0 => Command::new("mg lock-a b t v c".to_owned()),
                1 => Command::with_data("ms lock-a 3 T30 ME".to_owned(), b"tok".to_vec()),
                _ => Command::new("md lock-a C12".to_owned()),
            });
        }
        requests.push(commands);
    }
    let sizes: Vec<usize> = (0..input.below(4)).map(|_| 1 + input.below(16)).collect();
    let (bytes, expected) = if structured {
        let (bytes, expected) = server(&mut input, &requests, first, misses_carry_opaque);
        (bytes, Some(expected))
    } else {
        (input.rest().to_vec(), None)
    };
    let _ = supported("fuzz:1", &bytes);
    let gets: Vec<Vec<bool>> = requests
        .iter()
        .map(|commands| commands.iter().map(Command::is_get).collect())
        .collect();
    let replies = Box::new(Pieces {
        bytes: bytes.clone(),
        at: 0,
        sizes,
    });
    let (ended, answers) = run_ready(exchange_over(replies, requests, misses_carry_opaque, first));
    let mut opaque = first;
    let mut stopped = false;
    for (number, (answer, gets)) in answers.iter().zip(&gets).enumerate() {
        let opaques: Vec<u64> = gets
            .iter()
            .map(|_| {
                opaque += 1;
                opaque
            })
            .collect();
        match answer {
            None => stopped = true,
            Some(answer) => {
                assert!(
                    !stopped,
                    "{bytes:?}: request {number} answered after one left unanswered"
                );
                if let Ok(Answer { replies, .. }) = answer {
                    assert_eq!(replies.len(), gets.len(), "{bytes:?}: a reply per command");
                    for ((reply, opaque), is_get) in replies.iter().zip(&opaques).zip(gets) {
                        carries(reply, *opaque, *is_get, misses_carry_opaque, &bytes);
                    }
                }
            }
        }
    }
    if ended.is_ok() {
        assert!(
            answers.iter().all(Option::is_some),
            "{bytes:?}: the batch ended well with a request unanswered"
        );
    }
    if let Some(expected) = expected {
        let got: Vec<Outcome> = answers.iter().map(outcome).collect();
        assert_eq!(got, expected, "{bytes:?}: what each request got");
    }
}

/// Checks that `reply`, handed to the command sent with `opaque`, carries
/// it (or is a miss from a memcached that does not echo it on one).
fn carries(reply: &Reply, opaque: u64, is_get: bool, misses_carry_opaque: bool, bytes: &[u8]) {
    // The reader's bound on a value (`MAX_VALUE`): a lease's value is an
    // owner token, and a larger one is refused before it is read.
    let len = reply.value.as_ref().map_or(0, Vec::len);
    assert!(len <= 64 * 1024, "{bytes:?}: a {len}-byte value was read");
    let carried = reply.number(b'O');
    let old_miss = carried.is_none() && reply.code == Code::Miss && is_get && !misses_carry_opaque;
    assert!(
        old_miss || carried == i64::try_from(opaque).ok(),
        "{bytes:?}: a {:?} reply with the opaque {carried:?} was handed to request O{opaque}",
        reply.code
    );
}

/// What a request got, as the model says it.
fn outcome(answer: &Option<Result<Answer, Failure>>) -> Outcome {
    match answer {
        None => Outcome::Unanswered,
        Some(Ok(answer)) => Outcome::Replies(
            answer
                .replies
                .iter()
                .map(|reply| (reply.code, reply.value.clone()))
                .collect(),
        ),
        Some(Err(Failure::Protocol(_))) => Outcome::Protocol,
        Some(Err(failure)) => panic!("a request failed on its own with {failure}"),
    }
}

/// A server's replies to `requests` chosen by the input, and what each
/// request must get from them.
fn server(
    input: &mut Input<'_>,
    requests: &[Vec<Command>],
    first: u64,
    misses_carry_opaque: bool,
) -> (Vec<u8>, Vec<Outcome>) {
    let mut bytes = Vec::new();
    let mut expected = Vec::new();
    let mut opaque = first;
    let mut broken = false;
    for commands in requests {
        if broken {
            expected.push(Outcome::Unanswered);
            continue;
        }
        let mut replies = Vec::new();
        let mut error_line = false;
        for command in commands {
            opaque += 1;
            let sent = match input.below(16) {
                0..=5 => Sent::Done,
                6..=9 => Sent::Value(input.below(40)),
                10 => Sent::Wrong,
                11 => Sent::Bare,
                12 => Sent::BareMiss,
                13 => Sent::ErrorLine,
                14 => Sent::Cut,
                _ => Sent::Done,
            };
            let flags = ["", " t12", " c34 t-1", " b"][input.below(4)];
            let after = ["", " t5", " k"][input.below(3)];
            match sent {
                Sent::Done => {
                    bytes.extend(format!("HD{flags} O{opaque}{after}\r\n").bytes());
                    replies.push((Code::Done, None));
                }
                Sent::Value(len) => {
                    let value: Vec<u8> = (0..len).map(|_| input.byte()).collect();
                    bytes.extend(format!("VA {len}{flags} O{opaque}{after}\r\n").bytes());
                    bytes.extend(&value);
                    bytes.extend(b"\r\n");
                    replies.push((Code::Value, Some(value)));
                }
                Sent::Wrong => {
                    let token = match input.below(3) {
                        0 => format!("0{opaque}"),
                        1 => (opaque + 1 + input.below(100) as u64).to_string(),
                        _ => opaque
                            .saturating_sub(1 + input.below(100) as u64)
                            .to_string(),
                    };
                    bytes.extend(format!("HD{flags} O{token}\r\n").bytes());
                    broken = true;
                }
                Sent::Bare => {
                    bytes.extend(format!("HD{flags}\r\n").bytes());
                    broken = true;
                }
                Sent::BareMiss => {
                    bytes.extend(b"EN\r\n");
                    if command.is_get() && !misses_carry_opaque {
                        replies.push((Code::Miss, None));
                    } else {
                        broken = true;
                    }
                }
                Sent::ErrorLine => {
                    bytes.extend(b"SERVER_ERROR out of memory\r\n");
                    error_line = true;
                }
                Sent::Cut => {
                    let line = format!("VA 3 O{opaque}\r\nto");
                    bytes.extend(&line.as_bytes()[..input.below(line.len())]);
                    broken = true;
                }
            }
            if broken {
                break;
            }
        }
        expected.push(if broken {
            Outcome::Unanswered
        } else if error_line {
            Outcome::Protocol
        } else {
            Outcome::Replies(replies)
        });
    }
    (bytes, expected)
}
