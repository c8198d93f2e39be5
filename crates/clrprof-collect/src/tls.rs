//! TLS for the collector's listener (`collect --tls-cert/--tls-key [--tls-client-ca]`) and for the
//! CLI's own connections to a `tls://` collector, with `rustls`. The listener is one thread per
//! connection on std streams, so the connection is rustls's blocking `StreamOwned` (the same
//! rustls that `tokio-rustls` wraps for async code, without a runtime the collector does not use).

use std::path::Path;
use std::sync::Arc;

/// Why TLS could not be set up; names the file and what was wrong with it.
#[derive(Debug, thiserror::Error)]
#[error("{what} {path}: {reason}")]
pub struct TlsError {
    pub what: &'static str,
    pub path: String,
    pub reason: String,
}

fn err(what: &'static str, path: &Path, reason: impl ToString) -> TlsError {
    TlsError { what, path: path.display().to_string(), reason: reason.to_string() }
}

/// The certificates of a PEM file (at least one).
pub fn certs(what: &'static str, pem: &Path) -> Result<Vec<rustls::Certificate>, TlsError> {
    let f = std::fs::File::open(pem).map_err(|e| err(what, pem, e))?;
    let c = rustls_pemfile::certs(&mut std::io::BufReader::new(f)).map_err(|e| err(what, pem, e))?;
    if c.is_empty() {
        return Err(err(what, pem, "no CERTIFICATE in the file"));
    }
    Ok(c.into_iter().map(rustls::Certificate).collect())
}

/// The private key of a PEM file (PKCS#8, RSA or SEC1 EC).
pub fn key(what: &'static str, pem: &Path) -> Result<rustls::PrivateKey, TlsError> {
    let f = std::fs::File::open(pem).map_err(|e| err(what, pem, e))?;
    for item in rustls_pemfile::read_all(&mut std::io::BufReader::new(f)).map_err(|e| err(what, pem, e))? {
        match item {
            rustls_pemfile::Item::PKCS8Key(k) | rustls_pemfile::Item::RSAKey(k) | rustls_pemfile::Item::ECKey(k) => {
                return Ok(rustls::PrivateKey(k))
            }
            _ => {}
        }
    }
    Err(err(what, pem, "no PRIVATE KEY in the file"))
}

/// A root store of a PEM file's certificates.
pub fn roots(what: &'static str, pem: &Path) -> Result<rustls::RootCertStore, TlsError> {
    let mut r = rustls::RootCertStore::empty();
    for c in certs(what, pem)? {
        r.add(&c).map_err(|e| err(what, pem, e))?;
    }
    Ok(r)
}

/// The listener's configuration: its certificate chain and key, and, for mutual TLS, the CA
/// whose certificates agents must present.
pub fn server_config(
    cert: &Path,
    key_file: &Path,
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain = certs("--tls-cert", cert)?;
    let k = key("--tls-key", key_file)?;
    let b = rustls::ServerConfig::builder().with_safe_defaults();
    let b = match client_ca {
        Some(ca) => {
            b.with_client_cert_verifier(rustls::server::AllowAnyAuthenticatedClient::new(roots("--tls-client-ca", ca)?))
        }
        None => b.with_no_client_auth(),
    };
    let cfg = b.with_single_cert(chain, k).map_err(|e| err("--tls-key", key_file, e))?;
    Ok(Arc::new(cfg))
}

/// A client configuration trusting the CAs of `ca` (else the system's bundle), with a client
/// certificate for mutual TLS.
pub fn client_config(ca: Option<&Path>, client: Option<(&Path, &Path)>) -> Result<Arc<rustls::ClientConfig>, TlsError> {
    let roots = match ca {
        Some(ca) => roots("--tls-ca", ca)?,
        None => {
            let bundle = Path::new("/etc/ssl/certs/ca-certificates.crt");
            roots("the system's CA bundle", bundle)?
        }
    };
    let b = rustls::ClientConfig::builder().with_safe_defaults().with_root_certificates(roots);
    let cfg = match client {
        Some((cert, k)) => {
            b.with_single_cert(certs("--tls-cert", cert)?, key("--tls-key", k)?).map_err(|e| err("--tls-key", k, e))?
        }
        None => b.with_no_client_auth(),
    };
    Ok(Arc::new(cfg))
}

/// `tls://HOST:PORT` → (`HOST:PORT`, true); `HOST:PORT` → (itself, false).
pub fn split_scheme(server: &str) -> (&str, bool) {
    match server.strip_prefix("tls://") {
        Some(rest) => (rest, true),
        None => (server, false),
    }
}

/// The host of `HOST:PORT` (`[v6]:port` too) for the certificate check.
pub fn host_of(addr: &str) -> &str {
    let h = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
    h.trim_start_matches('[').trim_end_matches(']')
}
