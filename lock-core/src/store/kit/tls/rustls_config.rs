//! The rustls client configuration built from a [`Tls`]: the ring
//! provider, the webpki roots when no CA is given, and the three levels of
//! checking of [`Verify`].

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::{Tls, Verify};

/// The rustls client configuration for `tls`, checking the server's
/// certificate as `verify` says, over the ring provider (named here, so
/// that an application with another provider enabled too does not make
/// the first connection panic).
pub(crate) fn client_config(tls: &Tls, verify: Verify) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    match tls.ca_bytes()? {
        Some(pem) => {
            let mut found = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| format!("the CA (sslrootcert) is not PEM: {e}"))?;
                roots.add(cert).map_err(|e| {
                    format!("the CA (sslrootcert) is not a usable certificate: {e}")
                })?;
                found += 1;
            }
            if found == 0 {
                return Err("the CA (sslrootcert) holds no certificate; give a PEM file with `-----BEGIN CERTIFICATE-----`".to_owned());
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = ClientConfig::builder_with_provider(Arc::clone(&provider))
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("no TLS version to offer: {e}"))?;
    let webpki =
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), Arc::clone(&provider))
            .build()
            .map_err(|e| format!("the CA (sslrootcert) cannot check certificates: {e}"))?;
    let builder = match verify {
        Verify::Full => builder.with_webpki_verifier(webpki),
        Verify::Chain => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly(webpki))),
        Verify::Nothing => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unchecked(
                provider.signature_verification_algorithms,
            ))),
    };
    match tls.identity_bytes()? {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("the client certificate (sslcert) is not PEM: {e}"))?;
            if chain.is_empty() {
                return Err("the client certificate (sslcert) holds no certificate".to_owned());
            }
            let key = PrivateKeyDer::from_pem_slice(&key).map_err(|_| {
                "the client key (sslkey) holds no private key in PEM (PKCS#8, PKCS#1 or SEC1)"
                    .to_owned()
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("the client certificate and key do not go together: {e}"))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

/// `verify-ca`: the chain to a trusted CA, whatever host it names.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            checked => checked,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// `require` and `prefer` without a CA: any certificate, as libpq
/// takes it; the handshake's signatures are still checked.
#[derive(Debug)]
struct Unchecked(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}
