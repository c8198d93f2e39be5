//! The pushers' HTTP client: `ureq` with `rustls` (HTTPS with the system's CA certificates, or only
//! the CAs of `--tls-ca FILE`), one `POST` per profile, timeouts on connect, read and write.
//! An [`Endpoint`] is where profiles go: Pyroscope's `POST {prefix}/ingest?…` or an OTLP/HTTP
//! receiver's profiles path.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Where profiles go.
#[derive(Clone, Debug)]
pub struct Endpoint {
    /// `http` or `https`.
    pub scheme: String,
    pub host: String,
    pub port: u16,
    /// The URL's path (e.g. `/pyroscope` behind a proxy), without a trailing `/`.
    pub prefix: String,
    /// The `Authorization` header's value.
    pub auth: Option<String>,
    /// More request headers (`--otlp-header NAME:VALUE`).
    pub headers: Vec<(String, String)>,
    /// TLS settings of `https` (trusted CAs); `None`: the system's CA certificates.
    pub tls: Option<Arc<rustls::ClientConfig>>,
}

impl PartialEq for Endpoint {
    fn eq(&self, o: &Endpoint) -> bool {
        (&self.scheme, &self.host, self.port, &self.prefix, &self.auth, &self.headers)
            == (&o.scheme, &o.host, o.port, &o.prefix, &o.auth, &o.headers)
    }
}

/// Why a URL or a TLS option was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    #[error("{0}: expected http[s]://HOST[:PORT][/PATH]")]
    Invalid(String),
    #[error("--tls-ca {0}: {1}")]
    Ca(String, String),
}

impl Endpoint {
    /// Parses `http[s]://[user:password@]host[:port][/prefix]` (no scheme: `http`). `token` is
    /// `user:password` (Basic authentication, as Grafana Cloud uses) or a bearer token; it wins
    /// over URL credentials.
    pub fn parse(url: &str, token: Option<&str>) -> Result<Endpoint, UrlError> {
        let (scheme, rest) = match url.split_once("://") {
            Some(("http", r)) => ("http", r),
            Some(("https", r)) => ("https", r),
            Some(_) => return Err(UrlError::Invalid(url.into())),
            None => ("http", url),
        };
        let default_port = if scheme == "https" { "443" } else { "80" };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let bad = || UrlError::Invalid(url.into());
        let (host, port) = match hostport.strip_prefix('[') {
            Some(v6) => {
                let (h, p) = v6.split_once(']').ok_or_else(bad)?;
                (h, if p.is_empty() { default_port } else { p.strip_prefix(':').ok_or_else(bad)? })
            }
            None => hostport.split_once(':').unwrap_or((hostport, default_port)),
        };
        let port = port.parse::<u16>().map_err(|_| bad())?;
        if host.is_empty() || path.contains(['?', '#']) || host.contains(char::is_whitespace) {
            return Err(UrlError::Invalid(url.into()));
        }
        let auth = match (token, userinfo) {
            (Some(t), _) if t.contains(':') => Some(format!("Basic {}", base64(t.as_bytes()))),
            (Some(t), _) => Some(format!("Bearer {t}")),
            (None, Some(u)) => Some(format!("Basic {}", base64(u.as_bytes()))),
            (None, None) => None,
        };
        Ok(Endpoint {
            scheme: scheme.to_string(),
            host: host.to_string(),
            port,
            prefix: path.trim_end_matches('/').to_string(),
            auth,
            headers: Vec::new(),
            tls: None,
        })
    }

    /// Trusts only the CA certificates of a PEM file (a private CA) for `https`.
    pub fn trust_ca(mut self, pem: &Path) -> Result<Endpoint, UrlError> {
        self.tls = Some(client_config(pem).map_err(|e| UrlError::Ca(pem.display().to_string(), e))?);
        Ok(self)
    }

    /// `POST {prefix}/ingest?{query}` with `body` (Pyroscope's ingest API).
    pub fn ingest(&self, query: &str, body: &[u8], timeout: Duration) -> std::io::Result<(u16, String)> {
        self.post(&format!("{}/ingest?{query}", self.prefix), "application/octet-stream", body, timeout)
    }

    /// `POST target` (path and query) with `body`; the response's status code and the start of
    /// its body. A status that is not 2xx is a response, not an error.
    pub fn post(
        &self,
        target: &str,
        content_type: &str,
        body: &[u8],
        timeout: Duration,
    ) -> std::io::Result<(u16, String)> {
        let mut b = ureq::AgentBuilder::new()
            .timeout_connect(timeout)
            .timeout_read(timeout)
            .timeout_write(timeout)
            .user_agent(&format!("clrprof/{}", env!("CARGO_PKG_VERSION")));
        if let Some(tls) = &self.tls {
            b = b.tls_config(tls.clone());
        }
        let host = if self.host.contains(':') { format!("[{}]", self.host) } else { self.host.clone() };
        let url = format!("{}://{host}:{}{target}", self.scheme, self.port);
        let mut req = b.build().post(&url).set("Content-Type", content_type);
        if let Some(a) = &self.auth {
            req = req.set("Authorization", a);
        }
        for (k, v) in &self.headers {
            req = req.set(k, v);
        }
        let resp = match req.send_bytes(body) {
            Ok(r) => r,
            Err(ureq::Error::Status(_, r)) => r,
            Err(ureq::Error::Transport(t)) => return Err(std::io::Error::other(transport_message(&t))),
        };
        let status = resp.status();
        // A little of the body (for the log); the rest is not needed.
        let mut text = String::new();
        let _ = resp.into_reader().take(16 * 1024).read_to_string(&mut text);
        Ok((status, text.trim().chars().take(200).collect()))
    }
}

/// A transport error with its cause (the TLS alert or certificate problem, the refused connection).
fn transport_message(t: &ureq::Transport) -> String {
    let mut m = t.to_string();
    let mut src = std::error::Error::source(t);
    while let Some(s) = src {
        let s_text = s.to_string();
        if !m.contains(&s_text) {
            m.push_str(": ");
            m.push_str(&s_text);
        }
        src = s.source();
    }
    m
}

/// A rustls client configuration trusting only the certificates of a PEM file.
pub fn client_config(pem: &Path) -> Result<Arc<rustls::ClientConfig>, String> {
    let roots = root_store(pem)?;
    Ok(Arc::new(
        rustls::ClientConfig::builder().with_safe_defaults().with_root_certificates(roots).with_no_client_auth(),
    ))
}

/// The certificates of a PEM file as a root store; an error names what was wrong.
pub fn root_store(pem: &Path) -> Result<rustls::RootCertStore, String> {
    let f = std::fs::File::open(pem).map_err(|e| e.to_string())?;
    let certs = rustls_pemfile::certs(&mut std::io::BufReader::new(f)).map_err(|e| format!("not PEM: {e}"))?;
    if certs.is_empty() {
        return Err("no CERTIFICATE in the file".into());
    }
    let mut roots = rustls::RootCertStore::empty();
    for c in certs {
        roots.add(&rustls::Certificate(c)).map_err(|e| format!("a certificate is invalid: {e}"))?;
    }
    Ok(roots)
}

/// Standard base64 with padding.
fn base64(b: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(b.len().div_ceil(3) * 4);
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16 | (*c.get(1).unwrap_or(&0) as u32) << 8 | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(host: &str, port: u16, prefix: &str, auth: Option<&str>) -> Endpoint {
        Endpoint {
            scheme: "http".into(),
            host: host.into(),
            port,
            prefix: prefix.into(),
            auth: auth.map(str::to_string),
            headers: Vec::new(),
            tls: None,
        }
    }

    #[test]
    fn urls_and_authentication() {
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
        let e = Endpoint::parse("http://localhost:4040", None).unwrap();
        assert_eq!(e, ep("localhost", 4040, "", None));
        let e = Endpoint::parse("http://u:p@pyro.local/pyroscope/", None).unwrap();
        assert_eq!((e.port, e.prefix.as_str(), e.auth.as_deref()), (80, "/pyroscope", Some("Basic dTpw")));
        let e = Endpoint::parse("pyro:4040", Some("secret")).unwrap();
        assert_eq!((e.host.as_str(), e.auth.as_deref()), ("pyro", Some("Bearer secret")));
        let e = Endpoint::parse("http://[::1]:4040", Some("123:glc_x")).unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 4040));
        assert_eq!(e.auth.as_deref(), Some(format!("Basic {}", base64(b"123:glc_x"))).as_deref());
        let e = Endpoint::parse("https://profiles-prod.grafana.net", None).unwrap();
        assert_eq!((e.scheme.as_str(), e.port), ("https", 443));
        assert!(matches!(Endpoint::parse("http://x:port", None), Err(UrlError::Invalid(_))));
        assert!(matches!(Endpoint::parse("ftp://x", None), Err(UrlError::Invalid(_))));
        assert!(matches!(Endpoint::parse("http://", None), Err(UrlError::Invalid(_))));
        let bad = std::env::temp_dir().join(format!("clrprof-not-pem-{}", std::process::id()));
        std::fs::write(&bad, "hello").unwrap();
        let e = Endpoint::parse("https://x", None).unwrap().trust_ca(&bad).unwrap_err();
        assert!(e.to_string().ends_with("no CERTIFICATE in the file"), "{e}");
        let _ = std::fs::remove_file(bad);
    }
}
