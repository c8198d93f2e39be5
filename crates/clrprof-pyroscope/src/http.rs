//! A minimal HTTP/1.1 client on `std::net` for Pyroscope's ingest endpoint: one `POST` per
//! connection (`Connection: close`), timeouts on connect, write and read. Plain `http://` only:
//! reach an `https://` Pyroscope through a local TLS proxy (stunnel, nginx, the Grafana Agent).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Where profiles go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// Path prefix before `/ingest` (e.g. `/pyroscope` behind a proxy), without a trailing `/`.
    pub prefix: String,
    /// The `Authorization` header's value.
    pub auth: Option<String>,
}

/// Why a URL was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum UrlError {
    #[error("{0}: https is not supported; point --pyroscope at a local TLS proxy (e.g. stunnel) with an http:// URL")]
    Https(String),
    #[error("{0}: expected http://HOST[:PORT][/PATH]")]
    Invalid(String),
}

impl Endpoint {
    /// Parses `http://[user:password@]host[:port][/prefix]`. `token` is `user:password` (Basic
    /// authentication, as Grafana Cloud uses) or a bearer token; it wins over URL credentials.
    pub fn parse(url: &str, token: Option<&str>) -> Result<Endpoint, UrlError> {
        let rest = match url.split_once("://") {
            Some(("http", r)) => r,
            Some(("https", _)) => return Err(UrlError::Https(url.into())),
            Some(_) => return Err(UrlError::Invalid(url.into())),
            None => url,
        };
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
                (h, if p.is_empty() { "80" } else { p.strip_prefix(':').ok_or_else(bad)? })
            }
            None => hostport.split_once(':').unwrap_or((hostport, "80")),
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
        Ok(Endpoint { host: host.to_string(), port, prefix: path.trim_end_matches('/').to_string(), auth })
    }

    /// `POST {prefix}/ingest?{query}` with `body`; the response's status code and the start of its body.
    pub fn ingest(&self, query: &str, body: &[u8], timeout: Duration) -> std::io::Result<(u16, String)> {
        let addr = (self.host.as_str(), self.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, format!("{}: no address", self.host)))?;
        let mut s = TcpStream::connect_timeout(&addr, timeout)?;
        s.set_write_timeout(Some(timeout))?;
        s.set_read_timeout(Some(timeout))?;
        s.set_nodelay(true)?;
        let mut head = format!(
            "POST {}/ingest?{query} HTTP/1.1\r\nHost: {}:{}\r\nUser-Agent: clrprof/{}\r\n\
             Content-Type: application/octet-stream\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.prefix,
            self.host,
            self.port,
            env!("CARGO_PKG_VERSION"),
            body.len()
        );
        if let Some(a) = &self.auth {
            head.push_str(&format!("Authorization: {a}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes())?;
        s.write_all(body)?;
        s.flush()?;
        // The status line and a little of the body (for the log); the rest is not needed.
        let mut resp = Vec::new();
        let mut buf = [0u8; 4096];
        while resp.len() < 16 * 1024 {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => resp.extend_from_slice(&buf[..n]),
                Err(e) if resp.windows(4).any(|w| w == b"\r\n\r\n") && e.kind() != std::io::ErrorKind::Interrupted => {
                    break
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        let text = String::from_utf8_lossy(&resp);
        let status = text
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|c| c.parse::<u16>().ok())
            .ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::InvalidData, "no HTTP status line in the response")
            })?;
        let body = text.split_once("\r\n\r\n").map(|(_, b)| b.trim().chars().take(200).collect()).unwrap_or_default();
        Ok((status, body))
    }
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

    #[test]
    fn urls_and_authentication() {
        assert_eq!(base64(b"user:pass"), "dXNlcjpwYXNz");
        assert_eq!(base64(b"ab"), "YWI=");
        assert_eq!(base64(b"a"), "YQ==");
        let e = Endpoint::parse("http://localhost:4040", None).unwrap();
        assert_eq!(e, Endpoint { host: "localhost".into(), port: 4040, prefix: String::new(), auth: None });
        let e = Endpoint::parse("http://u:p@pyro.local/pyroscope/", None).unwrap();
        assert_eq!((e.port, e.prefix.as_str(), e.auth.as_deref()), (80, "/pyroscope", Some("Basic dTpw")));
        let e = Endpoint::parse("pyro:4040", Some("secret")).unwrap();
        assert_eq!((e.host.as_str(), e.auth.as_deref()), ("pyro", Some("Bearer secret")));
        let e = Endpoint::parse("http://[::1]:4040", Some("123:glc_x")).unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 4040));
        assert_eq!(e.auth.as_deref(), Some(format!("Basic {}", base64(b"123:glc_x"))).as_deref());
        assert!(matches!(Endpoint::parse("https://x", None), Err(UrlError::Https(_))));
        assert!(matches!(Endpoint::parse("http://x:port", None), Err(UrlError::Invalid(_))));
        assert!(matches!(Endpoint::parse("ftp://x", None), Err(UrlError::Invalid(_))));
        assert!(matches!(Endpoint::parse("http://", None), Err(UrlError::Invalid(_))));
    }
}
