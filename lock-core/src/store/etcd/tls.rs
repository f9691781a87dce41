//! TLS for an [`EtcdStore`](super::EtcdStore): whether its endpoints ask
//! for it (`https://`), etcd-client's TLS options built from the
//! configuration's [`Tls`] (feature `etcd-tls`), and a connection that
//! failed over TLS explained in words to act on.

use std::time::Duration;

use etcd_client::ConnectOptions;

use crate::store::kit::{BoxError, CallError, Tls};

/// `options` set up for TLS when the `endpoints` are `https://`, with the
/// certificates `tls` names (the public CAs when it is `None`); and the
/// certificates used, when TLS is. Refuses a mix of `https://` and other
/// endpoints, a `tls` given for endpoints that are not `https://`, and
/// either in a build without the `etcd-tls` feature.
pub(super) fn apply(
    options: ConnectOptions,
    endpoints: &[String],
    tls: Option<&Tls>,
) -> Result<(ConnectOptions, Option<Tls>), String> {
    let secure = endpoints.iter().filter(|e| is_https(e)).count();
    if secure > 0 && secure < endpoints.len() {
        return Err(format!(
            "the endpoints mix https:// and http:// ({}); one client uses TLS for every \
             member or for none: give them all as https://host:port (or all as http://)",
            endpoints.join(",")
        ));
    }
    if secure == 0 && tls.is_none() {
        return Ok((options, None));
    }
    #[cfg(not(feature = "etcd-tls"))]
    {
        let _ = options;
        Err(format!(
            "{} need lock-core's `etcd-tls` feature, which this build leaves out: \
             enable it (lock-core = {{ features = [\"etcd-tls\"] }})",
            if secure > 0 {
                "https:// endpoints"
            } else {
                "TLS certificates (EtcdConfig::tls)"
            }
        ))
    }
    #[cfg(feature = "etcd-tls")]
    {
        if secure == 0 {
            return Err(format!(
                "TLS certificates are given (EtcdConfig::tls) but the endpoints ({}) are not \
                 https://; write them as https://host:port to connect over TLS",
                endpoints.join(",")
            ));
        }
        let given = tls.cloned().unwrap_or_default();
        Ok((options.with_tls(rustls_options::build(&given)?), Some(given)))
    }
}

/// Whether `endpoint` is a TLS one, as etcd-client reads it.
fn is_https(endpoint: &str) -> bool {
    endpoint.starts_with("https://")
}

/// The error to give for a connect to `endpoints` that failed with
/// `failure`: over TLS (`tls` is what [`apply`] used), when it is one of
/// the usual TLS failures, its whole text followed by what to do about it;
/// else the failure itself. `left` is what remains of the call's time.
pub(super) async fn failure(
    failure: CallError<etcd_client::Error>,
    endpoints: &[String],
    tls: Option<&Tls>,
    left: Duration,
) -> BoxError {
    #[cfg(feature = "etcd-tls")]
    if let Some(tls) = tls {
        return explain::failure(failure, endpoints, tls, left).await;
    }
    let _ = (endpoints, tls, left);
    failure.into()
}

#[cfg(feature = "etcd-tls")]
mod rustls_options {
    use etcd_client::{Certificate, Identity, TlsOptions};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};

    use crate::store::kit::Tls;

    /// etcd-client's TLS options for `tls`: only its CA when it names one,
    /// else the webpki roots; its client certificate when it names one.
    /// The PEM is read and checked here, so that a wrong file is named at
    /// once rather than found as an untrusted server later (tonic skips
    /// what it cannot parse).
    pub(super) fn build(tls: &Tls) -> Result<TlsOptions, String> {
        let mut options = TlsOptions::new();
        options = match tls.ca_bytes()? {
            Some(pem) => {
                let mut found = 0;
                for cert in CertificateDer::pem_slice_iter(&pem) {
                    cert.map_err(|e| format!("the CA (sslrootcert) is not PEM: {e}"))?;
                    found += 1;
                }
                if found == 0 {
                    return Err("the CA (sslrootcert) holds no certificate; give a PEM file \
                                with `-----BEGIN CERTIFICATE-----`"
                        .to_owned());
                }
                options.ca_certificate(Certificate::from_pem(pem))
            }
            None => options.with_webpki_roots(),
        };
        if let Some((cert, key)) = tls.identity_bytes()? {
            let chain = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("the client certificate (sslcert) is not PEM: {e}"))?;
            if chain.is_empty() {
                return Err("the client certificate (sslcert) holds no certificate".to_owned());
            }
            // The error says only what is missing: the key's bytes stay out
            // of every message.
            PrivateKeyDer::from_pem_slice(&key).map_err(|_| {
                "the client key (sslkey) holds no private key in PEM (PKCS#8, PKCS#1 or SEC1)"
                    .to_owned()
            })?;
            options = options.identity(Identity::from_pem(cert, key));
        }
        Ok(options)
    }
}

#[cfg(feature = "etcd-tls")]
mod explain {
    use std::sync::Arc;
    use std::time::Duration;

    use rustls::pki_types::ServerName;
    use tokio::io::AsyncReadExt as _;
    use tokio::net::TcpStream;
    use tokio::time::{Instant, timeout_at};

    use crate::store::kit::{BoxError, CallError, Tls, Verify, client_config, tls_hint};

    /// The longest the handshake made to find a failure's cause waits for
    /// the server's first word once the handshake is done.
    const PROBE_READ: Duration = Duration::from_secs(2);

    /// See [`failure`](super::failure).
    ///
    /// etcd-client shows none of its error's causes, and tonic often loses
    /// the one that matters: when the server refuses the client's
    /// certificate (TLS 1.3 tells the client only after its handshake is
    /// done), the call may find the connection closed before it reads the
    /// server's alert. So when the failure's own text names no cause, one
    /// more handshake is made with the same certificates, reading until the
    /// server's first word, within what is left of the call's time.
    pub(super) async fn failure(
        failure: CallError<etcd_client::Error>,
        endpoints: &[String],
        tls: &Tls,
        left: Duration,
    ) -> BoxError {
        let text = match &failure {
            CallError::Store(error) => chain(error),
            CallError::TimedOut(..) => return failure.into(),
        };
        if let Some(hint) = tls_hint(&text) {
            return format!("{text}; {hint}").into();
        }
        // Only a connection that went away unexplained is worth asking
        // about: a refused password or a missing member says what it is.
        if !lost_connection(&text) {
            return failure.into();
        }
        let Some(endpoint) = endpoints.first() else {
            return failure.into();
        };
        let seen = handshake(endpoint, tls, Instant::now() + left)
            .await
            .unwrap_or_default();
        match tls_hint(&seen) {
            Some(hint) => {
                let found = format!("a handshake made to find the cause: {seen}");
                format!("{text}; {found}; {hint}").into()
            }
            None => failure.into(),
        }
    }

    /// What a TLS handshake with `endpoint` (`https://host:port`) with the
    /// certificates of `tls` ends in, and then the server's first word: the
    /// error's text, or `None` when nothing went wrong or nothing could be
    /// learnt by `deadline`.
    ///
    /// The name lookup, the connect, the handshake and the read all run in
    /// this future, under one deadline: at the deadline the socket and the
    /// TLS state are dropped, whatever the peer does (a peer that answers
    /// a byte at a time, each within any per-read time-out, kept a blocking
    /// probe and its connection for as long as it liked). Only a name
    /// lookup the system resolver has not answered goes on past it, on
    /// tokio's blocking pool, holding no connection: tokio's own lookups
    /// cannot be cancelled either.
    async fn handshake(endpoint: &str, tls: &Tls, deadline: Instant) -> Option<String> {
        let address = endpoint
            .strip_prefix("https://")?
            .trim_end_matches('/');
        let host = match address.rsplit_once(':') {
            Some((host, port)) if port.parse::<u16>().is_ok() => host,
            _ => address,
        };
        let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']'))
            .ok()?
            .to_owned();
        let mut config = client_config(tls, Verify::Full).ok()?;
        // As the gRPC client asks: a server that accepts the handshake
        // then speaks first (HTTP/2's settings), so the read below ends at
        // once instead of at its time-out.
        config.alpn_protocols = vec![b"h2".to_vec()];
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let probe = async {
            let socket = TcpStream::connect(address).await.ok()?;
            let mut stream = match connector.connect(name, socket).await {
                Ok(stream) => stream,
                Err(e) => return Some(e.to_string()),
            };
            // A server content with the handshake says nothing until
            // asked; the read then ends at its time-out, having learnt
            // nothing.
            let mut first = [0; 1];
            let read = timeout_at(
                deadline.min(Instant::now() + PROBE_READ),
                stream.read(&mut first),
            );
            match read.await {
                Ok(Err(e)) => Some(e.to_string()),
                Ok(Ok(_)) | Err(_) => None,
            }
        };
        timeout_at(deadline, probe).await.ok().flatten()
    }

    /// Whether `text` is a connection closed or reset without a reason.
    fn lost_connection(text: &str) -> bool {
        let lower = text.to_ascii_lowercase();
        ["connection closed", "canceled", "cancelled", "broken pipe", "reset", "eof"]
            .iter()
            .any(|sign| lower.contains(sign))
    }

    /// `error` and each of its causes, as one line.
    fn chain(error: &etcd_client::Error) -> String {
        use std::error::Error as _;
        let mut text = error.to_string();
        let mut cause = match error {
            etcd_client::Error::TransportError(e) => e.source(),
            etcd_client::Error::GRpcStatus(status) => status.source(),
            etcd_client::Error::IoError(e) => e.source(),
            _ => None,
        };
        while let Some(next) = cause {
            let shown = next.to_string();
            if !text.contains(&shown) {
                text.push_str(": ");
                text.push_str(&shown);
            }
            cause = next.source();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn endpoints(given: &[&str]) -> Vec<String> {
        given.iter().map(|e| (*e).to_owned()).collect()
    }

    #[test]
    fn plain_endpoints_without_certificates_use_no_tls() {
        let (_, secure) = apply(
            ConnectOptions::new(),
            &endpoints(&["http://a:1", "http://b:2"]),
            None,
        )
        .expect("plain");
        assert!(secure.is_none());
    }

    #[test]
    fn a_mix_of_http_and_https_is_refused_saying_so() {
        let why = apply(
            ConnectOptions::new(),
            &endpoints(&["https://a:1", "http://b:2"]),
            None,
        )
        .expect_err("mixed");
        assert!(why.contains("mix https:// and http://"), "{why}");
    }

    #[cfg(not(feature = "etcd-tls"))]
    #[test]
    fn without_the_feature_https_or_certificates_name_the_feature() {
        for (given, tls) in [
            (endpoints(&["https://a:1"]), None),
            (endpoints(&["http://a:1"]), Some(Tls::new().ca_file("/ca"))),
        ] {
            let why = apply(ConnectOptions::new(), &given, tls.as_ref()).expect_err("no feature");
            assert!(why.contains("`etcd-tls` feature"), "{why}");
        }
    }

    #[cfg(feature = "etcd-tls")]
    #[test]
    fn certificates_for_plain_endpoints_are_refused_not_left_unused() {
        let tls = Tls::new().ca_file("/ca");
        let why = apply(
            ConnectOptions::new(),
            &endpoints(&["http://a:1"]),
            Some(&tls),
        )
        .expect_err("not https");
        assert!(why.contains("https://host:port"), "{why}");
    }

    #[cfg(feature = "etcd-tls")]
    #[test]
    fn https_without_certificates_trusts_the_public_cas() {
        let (_, secure) =
            apply(ConnectOptions::new(), &endpoints(&["https://a:1"]), None).expect("public CAs");
        assert_eq!(secure, Some(Tls::new()));
    }

    /// A peer on 127.0.0.1 that accepts one connection and runs `peer` on
    /// it; its port, and what `peer` returns (how long the connection
    /// lasted, or `None` when it outlived `peer`'s patience).
    #[cfg(feature = "etcd-tls")]
    fn peer(
        peer: impl FnOnce(std::net::TcpStream) -> Option<Duration> + Send + 'static,
    ) -> (u16, std::sync::mpsc::Receiver<Option<Duration>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("port").port();
        let (said, lasted) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (socket, _) = listener.accept().expect("accept");
            let _ = said.send(peer(socket));
        });
        (port, lasted)
    }

    /// What a call that lost its connection over TLS to the peer on `port`
    /// answers, with a second left of its time; the test's hang guard
    /// fails it when it takes longer than that by far.
    #[cfg(feature = "etcd-tls")]
    async fn explained_with_a_second_left(port: u16) -> BoxError {
        let lost = etcd_client::Error::IoError(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "connection reset by peer",
        ));
        let (endpoints, tls) = ([format!("https://127.0.0.1:{port}")], Tls::new());
        let call = failure(
            CallError::Store(lost),
            &endpoints,
            Some(&tls),
            Duration::from_secs(1),
        );
        tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect("the connect error arrives within the call's time, not the probe's")
    }

    // The one extra handshake made to find why a connection was lost runs
    // beside the call: a peer that answers a byte at a time, each before
    // the socket's read time-out, must not keep it, nor its connection
    // and thread, long after the call's time is up.
    #[cfg(feature = "etcd-tls")]
    #[tokio::test]
    async fn the_handshake_made_to_find_a_cause_ends_with_the_calls_time_against_a_trickling_peer()
     {
        use std::io::Write as _;
        let (port, lasted) = peer(|mut socket| {
            let started = std::time::Instant::now();
            // A handshake record announcing 16 KiB, then one byte of it
            // every 100 ms: half an hour, were the reader patient.
            socket.write_all(&[0x16, 0x03, 0x03, 0x40, 0x00]).ok()?;
            while started.elapsed() < Duration::from_secs(60) {
                if socket.write_all(&[0]).is_err() {
                    return Some(started.elapsed());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            None
        });
        explained_with_a_second_left(port).await;
        let lasted = tokio::task::spawn_blocking(move || lasted.recv())
            .await
            .expect("the peer's thread")
            .expect("the peer says how long the connection lasted");
        assert!(
            lasted.is_some_and(|lasted| lasted < Duration::from_secs(20)),
            "the probe's connection is closed once the call's time is up, not kept open by \
             a peer that trickles: it lasted {lasted:?} (None: over a minute)"
        );
    }

    // The same for a peer that accepts and then says nothing at all.
    #[cfg(feature = "etcd-tls")]
    #[tokio::test]
    async fn the_handshake_made_to_find_a_cause_ends_with_the_calls_time_against_a_silent_peer() {
        use std::io::Read as _;
        let (port, lasted) = peer(|mut socket| {
            let started = std::time::Instant::now();
            socket
                .set_read_timeout(Some(Duration::from_secs(60)))
                .ok()?;
            let mut buffer = [0; 4096];
            // The client's hello, then nothing until the probe closes.
            while let Ok(read) = socket.read(&mut buffer) {
                if read == 0 {
                    return Some(started.elapsed());
                }
            }
            None
        });
        explained_with_a_second_left(port).await;
        let lasted = tokio::task::spawn_blocking(move || lasted.recv())
            .await
            .expect("the peer's thread")
            .expect("the peer says how long the connection lasted");
        assert!(
            lasted.is_some_and(|lasted| lasted < Duration::from_secs(20)),
            "the probe's connection is closed once the call's time is up, not kept open by \
             a silent peer: it lasted {lasted:?} (None: over a minute)"
        );
    }

    #[cfg(feature = "etcd-tls")]
    #[test]
    fn a_file_that_is_not_what_it_should_be_is_named_without_its_bytes() {
        let secure = endpoints(&["https://a:1"]);
        let no_ca = Tls::new().ca_pem("not a certificate");
        let why = apply(ConnectOptions::new(), &secure, Some(&no_ca)).expect_err("no CA");
        assert!(why.contains("sslrootcert"), "{why}");
        let missing = Tls::new().ca_file("/nonexistent/lock-core-ca.pem");
        let why = apply(ConnectOptions::new(), &secure, Some(&missing)).expect_err("no file");
        assert!(why.contains("lock-core-ca.pem"), "{why}");
        let no_key = Tls::new().client_cert_pem(
            "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            "secret key material",
        );
        let why = apply(ConnectOptions::new(), &secure, Some(&no_key)).expect_err("no key");
        assert!(why.contains("sslkey"), "{why}");
        assert!(!why.contains("secret key material"), "{why}");
    }
}
