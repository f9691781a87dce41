//! How a connection reaches its server: TCP, or TLS over TCP for a
//! `memcaches://` URL (memcached's `-Z`, with lock-core's `memcached-tls`
//! feature). Either way the connection's task gets a buffered reader and
//! writer, and speaks the same protocol over them.

use std::io;

use tokio::io::{AsyncRead, AsyncWrite, BufReader, BufWriter};
use tokio::net::TcpStream;

use super::failure::Failure;
use super::target::Target;

/// What a connection reads its replies from.
pub(super) type Reader = BufReader<Box<dyn AsyncRead + Send + Unpin>>;

/// What a connection writes its commands to.
pub(super) type Writer = BufWriter<Box<dyn AsyncWrite + Send + Unpin>>;

/// Opens connections to one server, each the same way.
#[derive(Clone)]
pub(super) struct Dialer {
    /// `host:port`.
    address: String,
    /// The TLS client's configuration (read again when its files change)
    /// and the name the server's certificate must carry; `None` for plain
    /// TCP.
    #[cfg(feature = "memcached-tls")]
    tls: Option<(
        std::sync::Arc<crate::store::kit::Reloading>,
        rustls::pki_types::ServerName<'static>,
    )>,
}

impl Dialer {
    /// A dialer for `target`: for TLS, with its certificates read and
    /// checked now, so that a CA or key that cannot be used fails the
    /// store's connect, not each connection after it.
    pub(super) fn new(target: &Target) -> Result<Dialer, String> {
        #[cfg(feature = "memcached-tls")]
        let tls = match &target.tls {
            Some(tls) => {
                let reloading = crate::store::kit::Reloading::new(tls.clone(), |tls| {
                    let mut config =
                        crate::store::kit::client_config(tls, crate::store::kit::Verify::Full)?;
                    // No session resumption: memcached sets no session id
                    // context, so a server that checks client certificates
                    // answers a resumed session with an internal error
                    // alert. A connection is opened rarely; a full
                    // handshake costs little.
                    config.resumption = rustls::client::Resumption::disabled();
                    Ok(config)
                })?;
                let name = rustls::pki_types::ServerName::try_from(target.host.clone()).map_err(
                    |e| {
                        format!(
                            "`{}` is not a host name or an IP address a TLS certificate can name: {e}",
                            target.host
                        )
                    },
                )?;
                Some((
                    std::sync::Arc::new(reloading),
                    name,
                ))
            }
            None => None,
        };
        #[cfg(not(feature = "memcached-tls"))]
        if target.tls.is_some() {
            return Err(
                "`memcaches://` URLs (TLS) need lock-core's `memcached-tls` feature: enable it"
                    .to_owned(),
            );
        }
        Ok(Dialer {
            address: target.address.clone(),
            #[cfg(feature = "memcached-tls")]
            tls,
        })
    }

    /// `host:port`.
    pub(super) fn address(&self) -> &str {
        &self.address
    }

    /// Whether its connections are TLS.
    pub(super) fn is_tls(&self) -> bool {
        #[cfg(feature = "memcached-tls")]
        return self.tls.is_some();
        #[cfg(not(feature = "memcached-tls"))]
        false
    }

    /// A new connection to the server, through the TLS handshake when there
    /// is one.
    pub(super) async fn open(&self) -> io::Result<(Reader, Writer)> {
        let stream = TcpStream::connect(&self.address).await?;
        stream.set_nodelay(true)?;
        #[cfg(feature = "memcached-tls")]
        if let Some((reloading, name)) = &self.tls {
            let connector = tokio_rustls::TlsConnector::from(reloading.config());
            let stream = connector.connect(name.clone(), stream).await?;
            let (read, write) = tokio::io::split(stream);
            return Ok((
                BufReader::new(Box::new(read)),
                BufWriter::new(Box::new(write)),
            ));
        }
        let (read, write) = stream.into_split();
        Ok((
            BufReader::new(Box::new(read)),
            BufWriter::new(Box::new(write)),
        ))
    }

    /// `failure` of a connection being opened, with what to do about it
    /// when it is one of the usual TLS failures (a CA that did not sign the
    /// server's certificate, a client certificate the server wants and did
    /// not get...), or a plain connection dropped before the server said
    /// its version, as a server that speaks only TLS does.
    pub(super) fn explained(&self, failure: Failure) -> Failure {
        let Failure::Io(e) = failure else {
            return failure;
        };
        let hint = if self.is_tls() {
            crate::store::kit::tls_hint(&format!("{e:?} {e}"))
        } else if matches!(
            e.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::UnexpectedEof
        ) {
            Some(
                "if the server speaks only TLS (memcached -Z), connect with a memcaches:// URL",
            )
        } else {
            None
        };
        match hint {
            Some(hint) => Failure::Connect(format!("{e}; {hint}")),
            None => Failure::Io(e),
        }
    }
}
