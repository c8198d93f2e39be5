//! The HTTP layer: a few worker threads on a tiny_http server. Every request must carry the
//! session token (`?token=` or, after the first page load, the cookie); answers carry a strict
//! Content-Security-Policy. Paths: `/` (the page), `/assets/*` (embedded), `/api/*` (JSON).

use std::collections::HashMap;
use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::thread::JoinHandle;

use tiny_http::{Header, Method, Request, Response};

use crate::api::Session;
use crate::request::Params;

/// The page's files, embedded in the binary.
const ASSETS: &[(&str, &str, &str)] = &[
    ("index.html", "text/html; charset=utf-8", include_str!("../assets/index.html")),
    ("app.js", "text/javascript; charset=utf-8", include_str!("../assets/app.js")),
    ("views.js", "text/javascript; charset=utf-8", include_str!("../assets/views.js")),
    ("util.js", "text/javascript; charset=utf-8", include_str!("../assets/util.js")),
    ("heap.js", "text/javascript; charset=utf-8", include_str!("../assets/heap.js")),
    ("style.css", "text/css; charset=utf-8", include_str!("../assets/style.css")),
];

/// No outside source of any kind; scripts, styles and data only from this server.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Where and how to serve.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub bind: IpAddr,
    /// 0: a free port.
    pub port: u16,
    pub token: String,
    /// Worker threads.
    pub workers: usize,
}

/// A running viewer server.
pub struct Viewer {
    server: Arc<tiny_http::Server>,
    workers: Vec<JoinHandle<()>>,
    pub addr: SocketAddr,
    token: String,
}

impl Viewer {
    pub fn start(session: Arc<Session>, opts: &ServeOptions) -> std::io::Result<Viewer> {
        let server = tiny_http::Server::http(SocketAddr::new(opts.bind, opts.port))
            .map_err(|e| std::io::Error::other(format!("cannot listen on {}:{}: {e}", opts.bind, opts.port)))?;
        let addr = server.server_addr().to_ip().ok_or_else(|| std::io::Error::other("not an IP listener"))?;
        let server = Arc::new(server);
        let cookie = format!("clrprof_token_{}", addr.port());
        let workers = (0..opts.workers.max(1))
            .map(|_| {
                let (server, session, token, cookie) =
                    (server.clone(), session.clone(), opts.token.clone(), cookie.clone());
                std::thread::spawn(move || {
                    for req in server.incoming_requests() {
                        // A panic in one request must not take the server down.
                        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                            respond(req, &session, &token, &cookie)
                        }));
                        if r.is_err() {
                            continue;
                        }
                    }
                })
            })
            .collect();
        Ok(Viewer { server, workers, addr, token: opts.token.clone() })
    }

    /// The URL to open (loopback name for an unspecified bind address).
    pub fn url(&self) -> String {
        let host = match self.addr.ip() {
            IpAddr::V4(v) if v.is_unspecified() => "127.0.0.1".to_string(),
            IpAddr::V6(v) if v.is_unspecified() => "[::1]".to_string(),
            IpAddr::V6(v) => format!("[{v}]"),
            ip => ip.to_string(),
        };
        format!("http://{host}:{}/?token={}", self.addr.port(), self.token)
    }

    /// Stops accepting requests and joins the workers.
    pub fn stop(self) {
        for _ in &self.workers {
            self.server.unblock();
        }
        for w in self.workers {
            let _ = w.join();
        }
    }
}

/// A fresh 128-bit token from the kernel's random source, in hex.
pub fn new_token() -> std::io::Result<String> {
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Equal in time independent of where the inputs differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn header(k: &str, v: &str) -> Header {
    Header::from_bytes(k.as_bytes(), v.as_bytes()).expect("static header")
}

fn with_security_headers<R: Read>(mut r: Response<R>) -> Response<R> {
    for (k, v) in [
        ("Content-Security-Policy", CSP),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
        ("Cache-Control", "no-store"),
        ("Cross-Origin-Opener-Policy", "same-origin"),
        ("Cross-Origin-Resource-Policy", "same-origin"),
    ] {
        r.add_header(header(k, v));
    }
    r
}

fn text(status: u16, body: &str) -> Response<std::io::Cursor<Vec<u8>>> {
    with_security_headers(
        Response::from_string(body)
            .with_status_code(status)
            .with_header(header("Content-Type", "text/plain; charset=utf-8")),
    )
}

/// Percent-decoding of a query component (`+` is a space); invalid UTF-8 is replaced.
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok());
                match hex {
                    Some(x) => {
                        out.push(x);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Splits `path?query` into the path and its decoded parameters.
pub fn split_url(url: &str) -> (String, HashMap<String, String>) {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let mut params = HashMap::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        params.insert(percent_decode(k), percent_decode(v));
    }
    (percent_decode(path), params)
}

fn cookie_token(req: &Request, name: &str) -> Option<String> {
    req.headers()
        .iter()
        .filter(|h| h.field.equiv("Cookie"))
        .flat_map(|h| h.value.as_str().split(';').map(str::trim).map(str::to_string).collect::<Vec<_>>())
        .find_map(|c| c.strip_prefix(&format!("{name}=")).map(str::to_string))
}

fn respond(req: Request, session: &Session, token: &str, cookie: &str) {
    let (path, params) = split_url(req.url());
    let from_query = params.get("token").is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()));
    let from_cookie = cookie_token(&req, cookie).is_some_and(|t| constant_time_eq(t.as_bytes(), token.as_bytes()));
    if !(from_query || from_cookie) {
        let _ =
            req.respond(text(401, "unauthorized: open the URL that `clrprof view` printed (it carries ?token=...)\n"));
        return;
    }
    if *req.method() != Method::Get && *req.method() != Method::Head {
        let _ = req.respond(text(405, "only GET is served\n"));
        return;
    }
    if path == "/favicon.ico" {
        let _ = req.respond(with_security_headers(Response::empty(204)));
        return;
    }
    let name = if path == "/" { "index.html" } else { path.strip_prefix("/assets/").unwrap_or("") };
    if path == "/" || path.starts_with("/assets/") {
        let Some((_, mime, body)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
            let _ = req.respond(text(404, "not found\n"));
            return;
        };
        let mut r = with_security_headers(Response::from_string(*body).with_header(header("Content-Type", mime)));
        if path == "/" {
            r.add_header(header("Set-Cookie", &format!("{cookie}={token}; Path=/; HttpOnly; SameSite=Strict")));
        }
        let _ = req.respond(r);
        return;
    }
    if let Some(what) = path.strip_prefix("/api/") {
        let answer = session.handle(what, &Params(params));
        let (status, body) = match answer {
            Ok(v) => (200, v.to_string()),
            Err(e) => (e.status, serde_json::json!({"error": e.message}).to_string()),
        };
        let r = Response::from_string(body)
            .with_status_code(status)
            .with_header(header("Content-Type", "application/json; charset=utf-8"));
        let _ = req.respond(with_security_headers(r));
        return;
    }
    let _ = req.respond(text(404, "not found\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_decode() {
        let (p, q) = split_url("/api/tree?fn=A%3Cb%3E+c&t=%5B%5D&x");
        assert_eq!(p, "/api/tree");
        assert_eq!(q["fn"], "A<b> c");
        assert_eq!(q["t"], "[]");
        assert_eq!(q["x"], "");
        assert_eq!(percent_decode("%"), "%");
        assert_eq!(percent_decode("%4"), "%4");
        assert_eq!(percent_decode("%zz"), "%zz");
        assert_eq!(percent_decode("%E2%9C%93"), "✓");
    }

    #[test]
    fn tokens_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert_eq!(new_token().unwrap().len(), 32);
    }
}
