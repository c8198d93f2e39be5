//! Reads a trace file into the canonical profile, reporting truncation as a warning.

use std::path::Path;

use anyhow::{Context, Result};
use clrprof_model::{Profile, ProfileBuilder};
use clrprof_trace::Decoder;

/// Loads a trace. Corrupt, foreign, empty or newer-version files are errors; a truncated trace
/// is read up to the damage with a warning on stderr (also kept in `Profile::messages`).
pub fn load(path: &Path, native_symbols: bool) -> Result<Profile> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open trace {}", path.display()))?;
    let reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut dec = Decoder::new(reader).with_context(|| format!("cannot read {}", path.display()))?;
    let mut b = ProfileBuilder::new();
    let mut count = 0u64;
    loop {
        match dec.next_record() {
            Ok(Some(r)) => {
                count += 1;
                b.add(&r);
            }
            Ok(None) => break,
            Err(e) => return Err(e).with_context(|| format!("cannot read {} (after {count} records)", path.display())),
        }
    }
    if let Some(t) = dec.truncation() {
        let msg = format!("{}: {t}", path.display());
        eprintln!("clrprof: warning: {msg}");
        b.warn(msg);
    }
    if !dec.skipped().is_empty() {
        let n: u64 = dec.skipped().values().sum();
        let tags: Vec<String> = dec.skipped().iter().map(|(tag, k)| format!("{tag} ({k})")).collect();
        b.warn(format!(
            "{}: {n} records of unknown types skipped (written by a newer clrprof): tags {}",
            path.display(),
            tags.join(", ")
        ));
    }
    if count == 0 {
        anyhow::bail!(
            "{} holds no records: the profiled process ended before the agent wrote anything",
            path.display()
        );
    }
    if native_symbols {
        Ok(b.finish_with(&mut clrprof_symbols::ElfSymbols::default()))
    } else {
        Ok(b.finish())
    }
}
