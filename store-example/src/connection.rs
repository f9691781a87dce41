//! One TCP connection to a [`MapServer`](crate::MapServer): a request
//! written, its reply read, one at a time.
//!
//! A connection knows nothing of deadlines or slots: a caller that gives
//! up on a reply drops the connection with it (see
//! [`MapStore`](crate::MapStore)), since the late reply would otherwise be
//! read as the answer to the next request.

use std::io;

use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use crate::protocol::{Reply, Request, read_line};

/// An open connection.
pub(crate) struct Connection {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
}

impl Connection {
    /// Connects to `address` (`host:port`).
    pub(crate) async fn open(address: &str) -> io::Result<Connection> {
        let stream = TcpStream::connect(address).await?;
        stream.set_nodelay(true)?;
        let (read, writer) = stream.into_split();
        Ok(Connection {
            reader: BufReader::new(read),
            writer,
        })
    }

    /// Sends `request` and reads its reply: one line, or for a listing its
    /// count and that many entries after it.
    pub(crate) async fn call(&mut self, request: &Request) -> io::Result<Vec<Reply>> {
        self.writer.write_all(request.encode().as_bytes()).await?;
        let first = self.next().await?;
        let Reply::Listed(count) = first else {
            return match first {
                Reply::Released(_) | Reply::Entry { .. } => {
                    Err(out_of_step(&format!("{first:?} arrived as an answer")))
                }
                answer => Ok(vec![answer]),
            };
        };
        let mut replies = Vec::with_capacity(count.saturating_add(1).min(1024));
        replies.push(first);
        for _ in 0..count {
            match self.next().await? {
                entry @ Reply::Entry { .. } => replies.push(entry),
                other => return Err(out_of_step(&format!("{other:?} inside a listing"))),
            }
        }
        Ok(replies)
    }

    /// The next line the server sends.
    pub(crate) async fn next(&mut self) -> io::Result<Reply> {
        let line = read_line(&mut self.reader).await?.ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the map server closed the connection",
            )
        })?;
        Reply::parse(&line).map_err(|why| out_of_step(&why))
    }
}

/// A reply that cannot be the answer: the connection is not to be trusted
/// further.
fn out_of_step(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the map server's reply makes no sense here ({why})"),
    )
}
