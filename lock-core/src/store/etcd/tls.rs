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
    use std::io::{ErrorKind, Read};
    use std::net::{TcpStream, ToSocketAddrs};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use rustls::pki_types::ServerName;

    use crate::store::kit::{BoxError, CallError, Tls, Verify, client_config, tls_hint};

    /// The longest the handshake made to find a failure's cause waits for
    /// the server's first word.
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
        let Some(endpoint) = endpoints.first().cloned() else {
            return failure.into();
        };
        let tls = tls.clone();
        // Bounded as a whole (the name lookup included, which blocks its
        // thread with no bound of its own): the call waits no longer than
        // what is left of its time, the probe's thread ends on its own.
        let probe = tokio::task::spawn_blocking(move || handshake(&endpoint, &tls, left));
        let probed = tokio::time::timeout(left, probe).await;
        let seen = probed.ok().and_then(Result::ok).flatten().unwrap_or_default();
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
    /// learnt within `left`.
    fn handshake(endpoint: &str, tls: &Tls, left: Duration) -> Option<String> {
        let started = Instant::now();
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
        let mut connection = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
        let target = address.to_socket_addrs().ok()?.next()?;
        let mut socket = TcpStream::connect_timeout(&target, left).ok()?;
        let left = left.checked_sub(started.elapsed())?.min(PROBE_READ);
        socket.set_read_timeout(Some(left)).ok()?;
        socket.set_write_timeout(Some(left)).ok()?;
        let mut stream = rustls::Stream::new(&mut connection, &mut socket);
        // A server content with the handshake says nothing until asked;
        // the read then ends at its time-out, having learnt nothing.
        match stream.read(&mut [0; 1]) {
            Err(e) if !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Some(e.to_string())
            }
            _ => None,
        }
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
