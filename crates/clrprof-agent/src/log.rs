//! The agent's own diagnostics: a file named by `CLRPROF_LOG`, never the app's stdout/stderr.
//! Off hot paths only (it formats and takes a lock).

use std::fs::File;
use std::io::Write;
use std::sync::Mutex;

/// The open log file. Each session's start replaces it: an attach session after an earlier one
/// in the same process (the library stays loaded) logs to the file that session names.
static LOG: Mutex<Option<File>> = Mutex::new(None);

/// Opens the log file (appending). Errors are ignored: logging must never stop the app.
pub(crate) fn init(path: &str) {
    if let Ok(f) = std::fs::OpenOptions::new().create(true).append(true).open(path) {
        if let Ok(mut l) = LOG.lock() {
            *l = Some(f);
        }
    }
}

pub(crate) fn write(level: &str, args: std::fmt::Arguments<'_>) {
    if let Ok(mut l) = LOG.lock() {
        if let Some(f) = l.as_mut() {
            let ts = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs_f64())
                .unwrap_or(0.0);
            let _ = writeln!(f, "{ts:.6} [{}] {level}: {args}", std::process::id());
        }
    }
}

#[macro_export]
macro_rules! log_info { ($($t:tt)*) => { $crate::log::write("info", format_args!($($t)*)) } }
#[macro_export]
macro_rules! log_warn { ($($t:tt)*) => { $crate::log::write("warning", format_args!($($t)*)) } }
#[macro_export]
macro_rules! log_error { ($($t:tt)*) => { $crate::log::write("error", format_args!($($t)*)) } }
