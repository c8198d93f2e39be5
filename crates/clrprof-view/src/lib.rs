//! `clrprof view`: a local, token-protected web viewer. The HTTP layer ([`server`]) only turns
//! requests into query-layer calls ([`api`]) and their typed answers into JSON; the page's assets
//! (plain ES modules, no build step) are embedded in the binary. What it shows comes from
//! [`sources`]: a loaded trace, or the runs of a collector's store.
#![forbid(unsafe_code)]

pub mod api;
pub mod diff;
pub mod heap;
pub mod request;
pub mod server;
mod sites;
mod source_panel;
pub mod sources;

pub use api::{LiveRun, ProfileSource, RunCatalog, RunStatus, Session};
pub use server::{new_token, ServeOptions, Viewer, CSP};
pub use sources::{LoadedSource, SourceFinder, StoreCatalog, StoreRun};
