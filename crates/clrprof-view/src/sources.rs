//! The viewer's data: a loaded trace or imported file ([`LoadedSource`]) and the runs of a
//! collector's store ([`StoreCatalog`], each opened run a [`StoreRun`] followed as it grows), as
//! the [`ProfileSource`], [`RunCatalog`] and [`LiveRun`] the API reads. Loading itself is
//! `clrprof-load`'s; native frames are named through one [`Symbolizer`] per source, so that each
//! library's symbol table is read once however many ranges are asked for.

use std::sync::{Arc, Mutex};

use clrprof_collect::{RunId, RunStore};
use clrprof_load::follow::RunFollower;
use clrprof_load::{Loader, Symbolizer};
use clrprof_model::samples::{SameGroup, SampleTime};
use clrprof_model::{Profile, TimeRange};
use clrprof_query::lines::{FunctionLines, SourceText};

use crate::api::{LiveRun, ProfileSource, RunCatalog, RunStatus};

/// Finds a method's source for the source panel (the file, the PDB's embedded source, its Source
/// Link URL): given by the command, which knows the symbol directories.
pub type SourceFinder = Arc<dyn Fn(&FunctionLines) -> Result<Option<SourceText>, String> + Send + Sync>;

/// A loaded trace or imported file: profiles for any time range.
pub struct LoadedSource {
    /// Shared with the thread that prepares it for ranges of time.
    loader: Arc<Loader>,
    symbols: Symbolizer,
    /// For the source panel: a symbolizer that resolves frames to lines, and the source finder.
    lines: Option<(Symbolizer, SourceFinder)>,
}

impl LoadedSource {
    /// A source over a loader that has read its trace (or file).
    ///
    /// Brushing asks for profiles of ranges again and again: sums at checkpoints make each one
    /// cost the records near its ends, not all the records inside it. They are prepared here on
    /// one core in the background (one pass over the records); ranges asked for meanwhile read the
    /// records. The timeline and every range read the records through their time index, made now
    /// (one pass).
    pub fn new(loader: Loader, symbols: Symbolizer) -> LoadedSource {
        loader.prepare_index();
        let loader = Arc::new(loader);
        let background = Arc::clone(&loader);
        let _ = std::thread::Builder::new().name("clrprof-ranges".into()).spawn(move || background.prepare_ranges());
        LoadedSource { loader, symbols, lines: None }
    }

    /// The same source, able to build profiles with lines (`symbols` resolves them: a
    /// [`Symbolizer::with_lines`]) and to find methods' sources, for the source panel.
    pub fn with_lines(self, symbols: Symbolizer, finder: SourceFinder) -> LoadedSource {
        LoadedSource { lines: Some((symbols, finder)), ..self }
    }
}

impl ProfileSource for LoadedSource {
    fn profile(&self, range: TimeRange) -> Profile {
        self.loader.profile(range, &mut *self.symbols.resolver())
    }

    // The viewer keeps the loader's sample records: its profiles need no second copy of them.
    fn profile_untimed(&self, range: TimeRange) -> Profile {
        self.loader.profile_untimed(range, &mut *self.symbols.resolver())
    }

    fn each_sample(&self, range: TimeRange, same_group: Option<SameGroup<'_>>, f: &mut dyn FnMut(SampleTime)) -> bool {
        self.loader.each_sample(range, same_group, f)
    }

    fn profile_lines(&self, range: TimeRange) -> Option<Profile> {
        let (symbols, _) = self.lines.as_ref()?;
        Some(self.loader.profile_untimed(range, &mut *symbols.resolver()))
    }

    fn source_text(&self, f: &FunctionLines) -> Result<Option<SourceText>, String> {
        match &self.lines {
            Some((_, finder)) => finder(f),
            None => Ok(None),
        }
    }
}

/// The runs of a store, for the viewer.
pub struct StoreCatalog {
    store: Arc<dyn RunStore>,
    /// Shared by the runs opened: they name frames of the same libraries.
    symbols: Symbolizer,
}

impl StoreCatalog {
    pub fn new(store: Arc<dyn RunStore>, symbols: Symbolizer) -> StoreCatalog {
        StoreCatalog { store, symbols }
    }
}

impl RunCatalog for StoreCatalog {
    fn runs(&self) -> Result<Vec<serde_json::Value>, String> {
        let mut runs = self.store.list().map_err(|e| e.to_string())?;
        runs.reverse();
        Ok(runs.iter().map(|r| serde_json::to_value(r).unwrap_or_default()).collect())
    }

    fn open(&self, id: i64) -> Result<Arc<dyn LiveRun>, String> {
        let info = self
            .store
            .get(RunId(id))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| format!("no run {id} in this store"))?;
        Ok(Arc::new(StoreRun {
            id,
            symbols: self.symbols.clone(),
            follower: Mutex::new(RunFollower::new(self.store.clone(), info.id)),
        }))
    }
}

/// A run read from its store as it grows (each refresh reads what was stored since the last).
pub struct StoreRun {
    id: i64,
    symbols: Symbolizer,
    follower: Mutex<RunFollower>,
}

impl ProfileSource for StoreRun {
    fn profile(&self, range: TimeRange) -> Profile {
        let f = self.follower.lock().unwrap_or_else(|e| e.into_inner());
        f.builder().profile(range, &mut *self.symbols.resolver())
    }
}

impl LiveRun for StoreRun {
    fn refresh(&self) -> Result<RunStatus, String> {
        let s = self.follower.lock().unwrap_or_else(|e| e.into_inner()).refresh()?;
        Ok(RunStatus {
            id: self.id,
            generation: s.generation,
            bytes: s.bytes,
            records: s.records,
            state: s.state.name().to_string(),
        })
    }
}
