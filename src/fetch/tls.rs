//! TLS client configuration: the trust anchors and the protocol settings.
//!
//! By default the anchors are Mozilla's (webpki-roots), compiled in so the host's files do not
//! change what is trusted. `--ca-file` replaces them (it does not add to them): the tests trust
//! exactly the CA they generated, and so can an operator with a private mirror.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

use super::FetchError;

/// Which certificates anchor trust.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Mozilla's root program, as shipped in webpki-roots.
    WebPki,
    /// Exactly the certificates in these PEM bytes.
    Pem(Vec<u8>),
}

impl Trust {
    pub fn from_ca_file(path: &Path) -> Result<Self, FetchError> {
        const MAX_CA_FILE: u64 = 4 << 20;
        let meta = std::fs::metadata(path)
            .map_err(|e| FetchError::Tls(format!("--ca-file {}: {e}", path.display())))?;
        if meta.len() > MAX_CA_FILE {
            return Err(FetchError::Tls(format!(
                "--ca-file {} is larger than {MAX_CA_FILE} bytes",
                path.display()
            )));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| FetchError::Tls(format!("--ca-file {}: {e}", path.display())))?;
        Ok(Self::Pem(bytes))
    }

    /// The client configuration: TLS 1.2 and 1.3 with ring's safe defaults, HTTP/1.1 by ALPN.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>, FetchError> {
        let mut roots = RootCertStore::empty();
        match self {
            Self::WebPki => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
            Self::Pem(bytes) => {
                for cert in CertificateDer::pem_slice_iter(bytes) {
                    let cert = cert.map_err(|e| FetchError::Tls(format!("--ca-file: {e}")))?;
                    roots
                        .add(cert)
                        .map_err(|e| FetchError::Tls(format!("--ca-file: {e}")))?;
                }
                if roots.is_empty() {
                    return Err(FetchError::Tls("--ca-file holds no certificate".into()));
                }
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| FetchError::Tls(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
