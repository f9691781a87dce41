//! The line protocol between [`MapStore`](crate::MapStore) and
//! [`MapServer`](crate::MapServer): one request per line, answered by one
//! reply line (a listing by a count and that many entry lines).
//!
//! The protocol itself is described in [the crate docs](crate#the-protocol).

use std::fmt::Write as _;
use std::io;
use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt};

/// The longest line either side reads: far more than any key or token
/// needs, hex-encoded; a longer one is a broken or hostile peer.
pub(crate) const MAX_LINE: u64 = 1 << 20;

/// One request, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Request {
    /// Is the server there?
    Ping,
    /// Set `key` to `token` for `ttl` if it is free or its lease expired.
    Acquire {
        key: String,
        token: String,
        ttl: Duration,
    },
    /// Delete `key`'s lease if its token is `token`.
    Release { key: String, token: String },
    /// Reset `key`'s lease to `ttl` if its token is `token`.
    Extend {
        key: String,
        token: String,
        ttl: Duration,
    },
    /// Delete `key`'s lease whoever holds it.
    Force { key: String },
    /// Who holds `key`, and for how long.
    Holder { key: String },
    /// Every live lease whose key starts with `prefix`.
    List { prefix: String },
    /// From now on, send a line for every release.
    Subscribe,
}

/// One reply line, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Reply {
    /// Answers `PING`.
    Pong,
    /// The acquire took the lease.
    Acquired,
    /// The key is held, for this much longer.
    Held(Duration),
    /// The release, extend or force-release changed the lease.
    Yes,
    /// It did not: the lease was not (or no longer) there, or not ours.
    No,
    /// Nobody holds the key.
    Free,
    /// The key's holder and its remaining TTL.
    Holder { token: String, remaining: Duration },
    /// A listing of this many entries follows.
    Listed(usize),
    /// One entry of a listing.
    Entry {
        key: String,
        token: String,
        remaining: Duration,
    },
    /// The subscription is in place: every release from now on is sent.
    Subscribed,
    /// A subscriber's notice: the lease on this key was released,
    /// force-released, or found expired.
    Released(String),
    /// The request could not be carried out, and why.
    Error(String),
}

impl Request {
    /// The request as a line, newline included.
    pub(crate) fn encode(&self) -> String {
        let mut line = String::new();
        match self {
            Request::Ping => line.push_str("PING"),
            Request::Acquire { key, token, ttl } => {
                line.push_str("ACQUIRE");
                fields(&mut line, &[key, token]);
                millis(&mut line, *ttl);
            }
            Request::Release { key, token } => {
                line.push_str("RELEASE");
                fields(&mut line, &[key, token]);
            }
            Request::Extend { key, token, ttl } => {
                line.push_str("EXTEND");
                fields(&mut line, &[key, token]);
                millis(&mut line, *ttl);
            }
            Request::Force { key } => {
                line.push_str("FORCE");
                fields(&mut line, &[key]);
            }
            Request::Holder { key } => {
                line.push_str("HOLDER");
                fields(&mut line, &[key]);
            }
            Request::List { prefix } => {
                line.push_str("LIST");
                fields(&mut line, &[prefix]);
            }
            Request::Subscribe => line.push_str("SUBSCRIBE"),
        }
        line.push('\n');
        line
    }

    /// Reads a request line (without its newline); why not, when it is
    /// not one.
    pub(crate) fn parse(line: &str) -> Result<Request, String> {
        let mut words = Words::new(line);
        let request = match words.word()? {
            "PING" => Request::Ping,
            "ACQUIRE" => Request::Acquire {
                key: words.text()?,
                token: words.text()?,
                ttl: words.millis()?,
            },
            "RELEASE" => Request::Release {
                key: words.text()?,
                token: words.text()?,
            },
            "EXTEND" => Request::Extend {
                key: words.text()?,
                token: words.text()?,
                ttl: words.millis()?,
            },
            "FORCE" => Request::Force { key: words.text()? },
            "HOLDER" => Request::Holder { key: words.text()? },
            "LIST" => Request::List {
                prefix: words.text()?,
            },
            "SUBSCRIBE" => Request::Subscribe,
            other => return Err(format!("unknown request {other:?}")),
        };
        words.end()?;
        Ok(request)
    }
}

impl Reply {
    /// The reply as a line, newline included.
    pub(crate) fn encode(&self) -> String {
        let mut line = String::new();
        match self {
            Reply::Pong => line.push_str("PONG"),
            Reply::Acquired => line.push_str("ACQUIRED"),
            Reply::Held(remaining) => {
                line.push_str("HELD");
                millis(&mut line, *remaining);
            }
            Reply::Yes => line.push_str("YES"),
            Reply::No => line.push_str("NO"),
            Reply::Free => line.push_str("FREE"),
            Reply::Holder { token, remaining } => {
                line.push_str("HOLDER");
                fields(&mut line, &[token]);
                millis(&mut line, *remaining);
            }
            Reply::Listed(count) => {
                let _ = write!(line, "LISTED {count}");
            }
            Reply::Entry {
                key,
                token,
                remaining,
            } => {
                line.push_str("ENTRY");
                fields(&mut line, &[key, token]);
                millis(&mut line, *remaining);
            }
            Reply::Subscribed => line.push_str("SUBSCRIBED"),
            Reply::Released(key) => {
                line.push_str("RELEASED");
                fields(&mut line, &[key]);
            }
            Reply::Error(why) => {
                // The message is the rest of the line: no newline in it.
                line.push_str("ERROR ");
                line.extend(why.chars().map(|c| if c == '\n' { ' ' } else { c }));
            }
        }
        line.push('\n');
        line
    }

    /// Reads a reply line (without its newline); why not, when it is not
    /// one.
    pub(crate) fn parse(line: &str) -> Result<Reply, String> {
        if let Some(why) = line.strip_prefix("ERROR ") {
            return Ok(Reply::Error(why.to_owned()));
        }
        let mut words = Words::new(line);
        let reply = match words.word()? {
            "PONG" => Reply::Pong,
            "ACQUIRED" => Reply::Acquired,
            "HELD" => Reply::Held(words.millis()?),
            "YES" => Reply::Yes,
            "NO" => Reply::No,
            "FREE" => Reply::Free,
            "HOLDER" => Reply::Holder {
                token: words.text()?,
                remaining: words.millis()?,
            },
            "LISTED" => Reply::Listed(
                words
                    .word()?
                    .parse()
                    .map_err(|_| "a listing's count is a number".to_owned())?,
            ),
            "ENTRY" => Reply::Entry {
                key: words.text()?,
                token: words.text()?,
                remaining: words.millis()?,
            },
            "SUBSCRIBED" => Reply::Subscribed,
            "RELEASED" => Reply::Released(words.text()?),
            other => return Err(format!("unknown reply {other:?}")),
        };
        words.end()?;
        Ok(reply)
    }
}

/// Reads one line, without its newline; `None` when the peer closed the
/// connection between lines. A line cut short by the end of the stream is
/// an error, never a request: a client that went away mid-write sent
/// nothing.
pub(crate) async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
) -> io::Result<Option<String>> {
    let mut line = String::new();
    let read = reader.take(MAX_LINE).read_line(&mut line).await?;
    if read == 0 {
        return Ok(None);
    }
    match line.strip_suffix('\n') {
        Some(whole) => Ok(Some(whole.to_owned())),
        None if read as u64 >= MAX_LINE => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a line longer than {MAX_LINE} bytes"),
        )),
        None => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the connection closed in the middle of a line",
        )),
    }
}

/// ` <hex>` for each of `texts`.
fn fields(line: &mut String, texts: &[&String]) {
    for text in texts {
        line.push(' ');
        if text.is_empty() {
            line.push('-');
        }
        for byte in text.bytes() {
            let _ = write!(line, "{byte:02x}");
        }
    }
}

/// ` <ms>`: `duration` in whole milliseconds, rounded up.
fn millis(line: &mut String, duration: Duration) {
    let ms = u64::try_from(duration.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
    let _ = write!(line, " {ms}");
}

/// The fields of a line, read in order.
struct Words<'a>(std::str::Split<'a, char>);

impl<'a> Words<'a> {
    fn new(line: &'a str) -> Self {
        Words(line.split(' '))
    }

    fn word(&mut self) -> Result<&'a str, String> {
        self.0
            .next()
            .filter(|word| !word.is_empty())
            .ok_or_else(|| "a field is missing".to_owned())
    }

    /// A hex-encoded text field.
    fn text(&mut self) -> Result<String, String> {
        let field = self.word()?;
        if field == "-" {
            return Ok(String::new());
        }
        let nibble = |digit: u8| char::from(digit).to_digit(16);
        let bytes = field
            .as_bytes()
            .chunks(2)
            .map(|pair| match pair {
                [high, low] => Some((nibble(*high)? * 16 + nibble(*low)?) as u8),
                _ => None,
            })
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| format!("{field:?} is not hex"))?;
        String::from_utf8(bytes).map_err(|_| format!("{field:?} is not UTF-8 in hex"))
    }

    /// A duration in whole milliseconds.
    fn millis(&mut self) -> Result<Duration, String> {
        let field = self.word()?;
        field
            .parse()
            .map(Duration::from_millis)
            .map_err(|_| format!("{field:?} is not a number of milliseconds"))
    }

    /// Nothing may follow the last field.
    fn end(&mut self) -> Result<(), String> {
        match self.0.next() {
            None => Ok(()),
            Some(extra) => Err(format!("unexpected {extra:?} at the end of the line")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A lock name may hold anything a string can: a space or newline in it
    // must not split the line, or the server would read another request.
    #[test]
    fn keys_and_tokens_with_spaces_newlines_and_any_utf8_survive_the_trip() {
        let key = "reports: nächtlich\n日本 {x}%".to_owned();
        let request = Request::Acquire {
            key: key.clone(),
            token: "a token@host:1".to_owned(),
            ttl: Duration::from_millis(1500),
        };
        let line = request.encode();
        assert_eq!(line.matches('\n').count(), 1, "one line: {line:?}");
        assert!(!line.contains("nächtlich"), "sent as hex: {line:?}");
        let parsed = Request::parse(line.trim_end_matches('\n')).expect("parses");
        assert_eq!(parsed, request);
        let empty = Request::List {
            prefix: String::new(),
        };
        assert_eq!(
            Request::parse(empty.encode().trim_end()).expect("empty prefix"),
            empty
        );
    }

    // A waiter sleeps for the remaining TTL it is told: rounding down
    // would wake it before the expiry, to find the key still held.
    #[test]
    fn a_remaining_ttl_is_rounded_up_to_whole_milliseconds() {
        let line = Reply::Held(Duration::from_micros(1001)).encode();
        assert_eq!(line, "HELD 2\n");
    }

    #[test]
    fn every_reply_reads_back_as_itself() {
        let replies = [
            Reply::Pong,
            Reply::Acquired,
            Reply::Held(Duration::from_millis(7)),
            Reply::Yes,
            Reply::No,
            Reply::Free,
            Reply::Holder {
                token: "t".to_owned(),
                remaining: Duration::from_secs(3),
            },
            Reply::Listed(2),
            Reply::Entry {
                key: "k k".to_owned(),
                token: "t".to_owned(),
                remaining: Duration::from_millis(1),
            },
            Reply::Subscribed,
            Reply::Released("k".to_owned()),
            Reply::Error("unknown request \"X\"".to_owned()),
        ];
        for reply in replies {
            let line = reply.encode();
            assert_eq!(
                Reply::parse(line.trim_end_matches('\n')),
                Ok(reply),
                "{line:?}"
            );
        }
    }

    // The server answers a bad line with an error and reads on: a bad line
    // must be refused whole, never half-read into a request.
    #[test]
    fn malformed_lines_are_refused_with_a_reason() {
        for line in [
            "",
            "NOPE",
            "ACQUIRE 6b",
            "ACQUIRE 6b 74 ten",
            "RELEASE 6 74",
            "RELEASE zz 74",
            "RELEASE ff 74",
            "HOLDER 6b extra",
            "HOLDER é9",
        ] {
            assert!(Request::parse(line).is_err(), "{line:?} must be refused");
        }
    }

    #[tokio::test]
    async fn a_line_cut_short_by_the_end_of_the_stream_is_not_a_line() {
        let mut whole: &[u8] = b"PING\nPI";
        assert_eq!(
            read_line(&mut whole).await.expect("a line").as_deref(),
            Some("PING")
        );
        let cut = read_line(&mut whole).await;
        assert!(cut.is_err(), "half a request is no request: {cut:?}");
        let mut closed: &[u8] = b"";
        assert!(read_line(&mut closed).await.expect("closed").is_none());
    }
}
