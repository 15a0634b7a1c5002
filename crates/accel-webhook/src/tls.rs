//! TLS for the webhook: the serving certificate read from PEM files and reloaded when they change
//! on disk (cert-manager rotates the Secret; the kubelet updates the mounted files), so a rotation
//! is picked up without a restart.
//!
//! This module owns loading and swapping the certificate. A file that fails to load is logged and
//! the last good certificate keeps serving: a half-written rotation never takes the webhook down.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// Why a certificate could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The certificate file holds no PEM certificate.
    #[error("{0}: no PEM certificate found")]
    NoCertificate(PathBuf),
    /// The key file holds no usable PEM private key.
    #[error("{path}: no usable PEM private key: {reason}")]
    Key { path: PathBuf, reason: String },
    /// rustls refused the configuration.
    #[error("tls configuration: {0}")]
    Config(#[from] rustls::Error),
}

/// The crypto provider: ring, so the build needs no system packages.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Load a certificate chain and key from PEM bytes.
fn certified_key(
    cert_path: &Path,
    cert: &[u8],
    key_path: &Path,
    key: &[u8],
) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .collect::<Result<_, _>>()
        .map_err(|_| TlsError::NoCertificate(cert_path.to_path_buf()))?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate(cert_path.to_path_buf()));
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| TlsError::Key {
        path: key_path.to_path_buf(),
        reason: match e {
            rustls::pki_types::pem::Error::NoItemsFound => "no PRIVATE KEY block found".to_string(),
            other => other.to_string(),
        },
    })?;
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|e| TlsError::Key {
            path: key_path.to_path_buf(),
            reason: e.to_string(),
        })?;
    Ok(CertifiedKey::new(chain, signing))
}

/// The serving certificate, swapped in place when its files change.
#[derive(Debug)]
pub struct CertReloader {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    /// The file contents the current certificate was built from.
    loaded: RwLock<(Vec<u8>, Vec<u8>)>,
}

impl CertReloader {
    /// Load the certificate now; an error here is fatal (there is nothing to serve yet).
    pub fn load(
        cert_path: impl Into<PathBuf>,
        key_path: impl Into<PathBuf>,
    ) -> Result<Arc<CertReloader>, TlsError> {
        let cert_path = cert_path.into();
        let key_path = key_path.into();
        let cert = read(&cert_path)?;
        let key = read(&key_path)?;
        let certified = certified_key(&cert_path, &cert, &key_path, &key)?;
        Ok(Arc::new(CertReloader {
            cert_path,
            key_path,
            current: RwLock::new(Arc::new(certified)),
            loaded: RwLock::new((cert, key)),
        }))
    }

    /// Re-read the files; swap the certificate when they changed and load. `Ok(true)` when swapped.
    pub fn reload(&self) -> Result<bool, TlsError> {
        let cert = read(&self.cert_path)?;
        let key = read(&self.key_path)?;
        if let Ok(loaded) = self.loaded.read()
            && loaded.0 == cert
            && loaded.1 == key
        {
            return Ok(false);
        }
        let certified = certified_key(&self.cert_path, &cert, &self.key_path, &key)?;
        if let Ok(mut current) = self.current.write() {
            *current = Arc::new(certified);
        }
        if let Ok(mut loaded) = self.loaded.write() {
            *loaded = (cert, key);
        }
        Ok(true)
    }

    /// Poll the files every `interval` until the task is dropped.
    pub async fn watch(self: Arc<Self>, interval: Duration) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match self.reload() {
                Ok(true) => {
                    tracing::info!(cert = %self.cert_path.display(), "serving certificate reloaded")
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "serving certificate not reloaded; the last good one keeps serving")
                }
            }
        }
    }

    /// A rustls server configuration answering with the current certificate.
    pub fn server_config(self: &Arc<Self>) -> Result<Arc<rustls::ServerConfig>, TlsError> {
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_cert_resolver(self.clone());
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

impl ResolvesServerCert for CertReloader {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current.read().ok().map(|c| c.clone())
    }
}
