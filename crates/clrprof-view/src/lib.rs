//! `clrprof view`: a local, token-protected web viewer. The HTTP layer ([`server`]) only turns
//! requests into query-layer calls ([`api`]) and their typed answers into JSON; the page's assets
//! (plain ES modules, no build step) are embedded in the binary.
#![forbid(unsafe_code)]

pub mod api;
pub mod diff;
pub mod request;
pub mod server;

pub use api::{LiveRun, ProfileSource, RunCatalog, RunStatus, Session};
pub use server::{new_token, ServeOptions, Viewer, CSP};
