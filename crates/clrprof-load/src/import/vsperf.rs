//! The CSV summaries of Visual Studio's `vsperfreport /summary:all` (VsPerfView's input).
//!
//! Two reports are read; columns are found by their header names, so the VS2010 layout, the
//! VS2012 one (extra `Avg`/`Max`/`Min` columns, other orders) and later ones are all read:
//!
//! - **CallTree** (`Level,Function Name,…`): one row per call path, depth first, `Level` its
//!   depth. Each row becomes a stack with the row's exclusive value, so every path is exact.
//! - **CallerCallee** (`Type,Function Name,…` or, without a header, the seed's
//!   `"Root","_wmain",14,0,"100,00","0,00"`): per function a `Root` row and its `Caller`/`Callee`
//!   rows (`Type` is the word or 0/1/2). A caller/callee summary has no paths, so they are
//!   estimated (as VsPerfView's "adjusted values" do): a function's paths are its callers' paths
//!   extended by it, each caller weighted by its calls (instrumented) or inclusive samples
//!   (sampled) — at most 64 paths per function, recursion left out. Each function's exclusive
//!   value is split over its paths, so self values and totals are exact; inclusive values, edges
//!   above the direct callers and entry points are estimates (a profile message says so).
//!
//! Values: `Inclusive/Exclusive Samples` (sampling: samples, each standing for the import's
//! sample period) or `Number of Calls` with `Elapsed Exclusive Time` (instrumentation, in ms;
//! `Avg Elapsed Exclusive Time` × calls when only the average is there, `Application Exclusive
//! Time` when neither). Numbers may be quoted, with thousands separators; the decimal separator
//! (`.` or `,`) is taken from the percentage columns. UTF-16 files (`vsperfreport /U`) are read.

use std::collections::HashMap;
use std::rc::Rc;

use clrprof_model::{Cost, FrameId, Profile, StackId};

use super::{samples, Builder, ImportError, ImportOptions};

/// A duration for messages: `10 ms`, `0.5 ms`.
pub(crate) fn ms(ns: u64) -> String {
    let v = ns as f64 / 1e6;
    if v.fract() == 0.0 {
        format!("{v:.0} ms")
    } else {
        format!("{v} ms")
    }
}

/// Splits CSV text into records: `,` separated, `"` quoted with `""` escapes, a quoted field may
/// span lines. Trailing empty fields are kept.
fn records(t: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rec: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                c => field.push(c),
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            ',' => rec.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                rec.push(std::mem::take(&mut field));
                if rec.iter().any(|f| !f.trim().is_empty()) {
                    out.push(std::mem::take(&mut rec));
                } else {
                    rec.clear();
                }
            }
            c => field.push(c),
        }
    }
    rec.push(field);
    if rec.iter().any(|f| !f.trim().is_empty()) {
        out.push(rec);
    }
    out
}

fn norm(h: &str) -> String {
    h.trim().trim_matches('\u{feff}').to_ascii_lowercase()
}

/// The type of a CallerCallee row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RowType {
    Root,
    Caller,
    Callee,
}

fn row_type(s: &str) -> Option<RowType> {
    match norm(s).as_str() {
        "root" | "0" => Some(RowType::Root),
        "caller" | "1" => Some(RowType::Caller),
        "callee" | "2" => Some(RowType::Callee),
        _ => None,
    }
}

/// True when `t` starts like a vsperfreport CSV: a header naming `Function Name` with `Level` or
/// `Type`, or a headerless CallerCallee row.
pub fn looks_like(t: &str) -> bool {
    let Some(first) = t.lines().map(str::trim).find(|l| !l.is_empty()) else { return false };
    let fields: Vec<String> = records(first).into_iter().next().unwrap_or_default();
    let names: Vec<String> = fields.iter().map(|f| norm(f)).collect();
    let has = |n: &str| names.iter().any(|h| h == n);
    (has("function name") && (has("level") || has("type")))
        || (fields.len() >= 4 && matches!(norm(&fields[0]).as_str(), "root" | "caller" | "callee"))
}

/// Where each value is, by column index.
#[derive(Debug, Default)]
struct Columns {
    level: Option<usize>,
    kind: Option<usize>,
    name: usize,
    module: Option<usize>,
    root_name: Option<usize>,
    incl_samples: Option<usize>,
    excl_samples: Option<usize>,
    calls: Option<usize>,
    excl_time: Option<usize>,
    avg_excl_time: Option<usize>,
    /// `Avg … Inclusive Time` and the inclusive and exclusive percentages of the same clock
    /// (elapsed or application) as `avg_excl_time`: with the calls they give the run's total.
    avg_incl_time: Option<usize>,
    incl_pct: Option<usize>,
    excl_pct: Option<usize>,
    percents: Vec<usize>,
}

impl Columns {
    fn from_header(h: &[String]) -> Result<Columns, ImportError> {
        let names: Vec<String> = h.iter().map(|f| norm(f)).collect();
        let find = |n: &str| names.iter().position(|h| h == n);
        let elapsed = find("avg elapsed exclusive time").is_some();
        let clock = if elapsed { "elapsed" } else { "application" };
        let name = find("function name")
            .ok_or_else(|| ImportError("vsperfreport CSV: the header has no 'Function Name' column".into()))?;
        let c = Columns {
            level: find("level"),
            kind: find("type"),
            name,
            module: find("module name"),
            root_name: find("root function name"),
            incl_samples: find("inclusive samples"),
            excl_samples: find("exclusive samples"),
            calls: find("number of calls"),
            excl_time: find("elapsed exclusive time").or_else(|| find("application exclusive time")),
            avg_excl_time: find("avg elapsed exclusive time").or_else(|| find("avg application exclusive time")),
            avg_incl_time: find(&format!("avg {clock} inclusive time")),
            incl_pct: find(&format!("{clock} inclusive time %")),
            excl_pct: find(&format!("{clock} exclusive time %")),
            percents: (0..names.len()).filter(|&i| names[i].ends_with('%')).collect(),
        };
        if c.level.is_none() && c.kind.is_none() {
            return Err(ImportError(
                "vsperfreport CSV: neither a 'Level' (CallTree) nor a 'Type' (CallerCallee) column; only those two reports are read"
                    .into(),
            ));
        }
        if c.excl_samples.is_none() && c.calls.is_none() && c.excl_time.is_none() {
            return Err(ImportError(
                "vsperfreport CSV: no 'Exclusive Samples', 'Number of Calls' or 'Elapsed Exclusive Time' column".into(),
            ));
        }
        Ok(c)
    }

    /// The seed's headerless CallerCallee rows: type, name, inclusive and exclusive samples, and
    /// their percentages.
    fn headerless() -> Columns {
        Columns {
            kind: Some(0),
            name: 1,
            incl_samples: Some(2),
            excl_samples: Some(3),
            percents: vec![4, 5],
            ..Default::default()
        }
    }

    fn sampled(&self) -> bool {
        self.excl_samples.is_some() && self.calls.is_none()
    }
}

/// The decimal separator of the file, from its percentage columns: `,` when a percentage has a
/// comma and no point.
fn decimal_comma(rows: &[Vec<String>], c: &Columns) -> bool {
    for r in rows.iter().take(1000) {
        for &i in &c.percents {
            if let Some(v) = r.get(i) {
                let v = v.trim();
                if v.contains('.') {
                    return false;
                }
                if v.contains(',') {
                    return true;
                }
            }
        }
    }
    false
}

/// A number as vsperfreport writes it: thousands separators (the other of `.`/`,`, spaces,
/// non-breaking spaces) dropped.
fn number(s: &str, comma: bool) -> Option<f64> {
    let (dec, thousands) = if comma { (',', '.') } else { ('.', ',') };
    let t: String = s
        .trim()
        .chars()
        .filter(|&c| c != thousands && c != ' ' && c != '\u{a0}' && c != '\u{202f}' && c != '\'')
        .map(|c| if c == dec { '.' } else { c })
        .collect();
    if t.is_empty() {
        return Some(0.0);
    }
    let v: f64 = t.parse().ok()?;
    (v.is_finite() && v >= 0.0).then_some(v)
}

/// A number and its rounding error: half a unit of its last printed digit (`0.04` ± 0.005).
fn number_err(s: &str, comma: bool) -> Option<(f64, f64)> {
    let v = number(s, comma)?;
    let dec = if comma { ',' } else { '.' };
    let t = s.trim();
    let decimals = t.rfind(dec).map_or(0, |i| t[i + 1..].chars().filter(char::is_ascii_digit).count());
    Some((v, 0.5 * 10f64.powi(-(decimals.min(30) as i32))))
}

/// A row's values.
struct Values {
    excl: Cost,
    /// Inclusive samples or calls, to split a function's self value over its callers.
    weight: f64,
    calls: u64,
}

fn to_u64(v: f64) -> u64 {
    if v >= u64::MAX as f64 {
        u64::MAX
    } else {
        v.round() as u64
    }
}

struct Reader<'a> {
    c: Columns,
    comma: bool,
    opts: &'a ImportOptions,
    /// The run's total time in ms and its error, when only averages and percentages give
    /// exclusive times (VS2012 and later instrumentation reports).
    total_ms: Option<(f64, f64)>,
}

/// The run's total time (ms) and its error from the row that tells it most precisely:
/// calls × average inclusive time / inclusive share. The averages are rounded to 0.01 ms (a
/// function called 2,893,824 times at "0.04" ms may have taken anywhere between 101 and 130 s),
/// the percentages to 0.01 points; the row whose two roundings weigh least is taken.
fn total_ms(rows: &[Vec<String>], c: &Columns, comma: bool) -> Option<(f64, f64)> {
    let (calls, avg, pct) = (c.calls?, c.avg_incl_time?, c.incl_pct?);
    let mut best: Option<(f64, f64)> = None;
    for r in rows {
        let get = |i: usize| r.get(i).and_then(|s| number_err(s, comma));
        let (Some((n, _)), Some((a, ae)), Some((p, pe))) = (get(calls), get(avg), get(pct)) else { continue };
        if n <= 0.0 || a <= 0.0 || p <= 0.0 {
            continue;
        }
        let total = n * a / (p / 100.0);
        let rel = ae / a + pe / p;
        if total.is_finite() && best.is_none_or(|(t, e)| rel < e / t) {
            best = Some((total, total * rel));
        }
    }
    best
}

impl Reader<'_> {
    fn get(&self, r: &[String], col: Option<usize>, line: usize, what: &str) -> Result<Option<f64>, ImportError> {
        let Some(i) = col else { return Ok(None) };
        let Some(s) = r.get(i) else { return Ok(None) };
        number(s, self.comma)
            .map(Some)
            .ok_or_else(|| ImportError(format!("vsperfreport CSV, record {line}: '{}' is not a {what}", s.trim())))
    }

    fn values(&self, r: &[String], line: usize) -> Result<Values, ImportError> {
        let calls = self.get(r, self.c.calls, line, "call count")?.map(to_u64);
        if self.c.sampled() {
            let excl = to_u64(self.get(r, self.c.excl_samples, line, "sample count")?.unwrap_or(0.0));
            let incl = self.get(r, self.c.incl_samples, line, "sample count")?.unwrap_or(0.0);
            return Ok(Values { excl: samples(excl, self.opts.sample_period_ns), weight: incl, calls: 0 });
        }
        let calls = calls.unwrap_or(0);
        let time_ms = match self.get(r, self.c.excl_time, line, "time")? {
            Some(t) => t,
            None => self.exclusive_from_average(r, calls, line)?,
        };
        let time_ns = to_u64(time_ms * 1e6);
        Ok(Values { excl: Cost { calls, time_ns, ..Default::default() }, weight: calls as f64, calls })
    }

    /// Exclusive time (ms) from `Avg Elapsed Exclusive Time` × calls while the average's rounding
    /// is within 1% of it, else from the exclusive percentage of the run's total when that is
    /// more precise: averages are printed to 0.01 ms, so a function called millions of times at
    /// "0.00" ms is read from its share.
    fn exclusive_from_average(&self, r: &[String], calls: u64, line: usize) -> Result<f64, ImportError> {
        let cell = |col: Option<usize>| col.and_then(|i| r.get(i));
        let by_avg = match cell(self.c.avg_excl_time) {
            Some(s) => {
                let (a, e) = number_err(s, self.comma).ok_or_else(|| {
                    ImportError(format!("vsperfreport CSV, record {line}: '{}' is not a time", s.trim()))
                })?;
                Some((a * calls as f64, e * calls as f64))
            }
            None => None,
        };
        let by_share = match (cell(self.c.excl_pct), self.total_ms) {
            (Some(s), Some((t, te))) => {
                number_err(s, self.comma).map(|(p, pe)| (p / 100.0 * t, pe / 100.0 * t + p / 100.0 * te))
            }
            _ => None,
        };
        Ok(match (by_avg, by_share) {
            // The reported average is taken while its rounding is within 1% of the value.
            (Some((a, ae)), Some((p, pe))) => {
                if ae <= a * 0.01 || ae <= pe {
                    a
                } else {
                    p
                }
            }
            (Some((a, _)), None) => a,
            (None, Some((p, _))) => p,
            (None, None) => 0.0,
        })
    }

    fn frame(&self, b: &mut Builder, r: &[String]) -> FrameId {
        let name = r.get(self.c.name).map(|s| s.trim()).unwrap_or("");
        let name = if name.is_empty() { "[unnamed]" } else { name };
        let module = self.c.module.and_then(|i| r.get(i)).map(|s| s.trim()).unwrap_or("");
        b.frame(module, name)
    }
}

/// Reads a vsperfreport CSV summary (CallTree or CallerCallee).
pub fn read(bytes: &[u8], opts: &ImportOptions) -> Result<Profile, ImportError> {
    let t = super::text(bytes);
    let rows = records(&t);
    let Some(first) = rows.first() else { return Err(ImportError("vsperfreport CSV: the file is empty".into())) };
    let headerless = first.first().is_some_and(|f| row_type(f).is_some()) && first.len() >= 4;
    let (c, body) =
        if headerless { (Columns::headerless(), &rows[..]) } else { (Columns::from_header(first)?, &rows[1..]) };
    let comma = decimal_comma(body, &c);
    let total = if c.excl_time.is_none() { total_ms(body, &c, comma) } else { None };
    let rd = Reader { c, comma, opts, total_ms: total };
    let mut b = Builder::new("(imported vsperfreport CSV)");
    let report = if rd.c.level.is_some() { call_tree(&rd, &mut b, body)? } else { caller_callee(&rd, &mut b, body)? };
    let mode = if rd.c.sampled() {
        format!("sampling; each sample counted as {} of CPU time", ms(opts.sample_period_ns))
    } else if let Some((t, e)) = rd.total_ms {
        format!(
            "instrumentation; times in ms, exclusive times from the averages, or from the shares of the run's {t:.0} ms (± {e:.1} ms) where an average is rounded by more than 1%"
        )
    } else {
        "instrumentation; times in ms".to_string()
    };
    let mut note = format!(
        "imported vsperfreport {report} CSV: {} records, {mode}, decimal separator '{}'",
        body.len(),
        if comma { ',' } else { '.' }
    );
    if report == "CallerCallee" {
        note += "; a caller/callee summary has no call paths: they are estimated from the callers' shares (self values exact; inclusive values and paths estimated; the CallTree report has the real paths)";
    }
    b.finish(note, opts.sample_period_ns)
}

fn call_tree(rd: &Reader<'_>, b: &mut Builder, body: &[Vec<String>]) -> Result<&'static str, ImportError> {
    let level_col = rd.c.level.unwrap_or(0);
    // (level, frame) of the current path.
    let mut path: Vec<(u64, FrameId)> = Vec::new();
    let mut frames: Vec<FrameId> = Vec::new();
    for (i, r) in body.iter().enumerate() {
        let line = i + 2;
        let level = r.get(level_col).map(|s| s.trim()).unwrap_or("");
        let Ok(level) = level.parse::<u64>() else {
            return Err(ImportError(format!("vsperfreport CSV, record {line}: level '{level}' is not a number")));
        };
        while path.last().is_some_and(|&(l, _)| l >= level) {
            path.pop();
        }
        let f = rd.frame(b, r);
        path.push((level, f));
        let v = rd.values(r, line)?;
        frames.clear();
        frames.extend(path.iter().map(|&(_, f)| f));
        if let Some(s) = b.stack(&frames) {
            b.add(s, &v.excl);
        }
    }
    Ok("CallTree")
}

/// Splits `total` over `weights` in proportion, the parts summing to `total` exactly (largest
/// remainders first); equal parts when every weight is 0.
fn split(total: u64, weights: &[f64]) -> Vec<u64> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let sum: f64 = weights.iter().sum();
    let share = |w: f64| if sum > 0.0 { w / sum } else { 1.0 / n as f64 };
    let exact: Vec<f64> = weights.iter().map(|&w| total as f64 * share(w)).collect();
    let mut parts: Vec<u64> = exact.iter().map(|&e| (e.floor() as u64).min(total)).collect();
    let mut left = total.saturating_sub(parts.iter().fold(0u64, |a, &p| a.saturating_add(p)));
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())).then(a.cmp(&b)));
    for &i in order.iter().cycle().take(n * 2) {
        if left == 0 {
            break;
        }
        parts[i] += 1;
        left -= 1;
    }
    parts
}

fn split_cost(c: &Cost, weights: &[f64]) -> Vec<Cost> {
    let calls = split(c.calls, weights);
    let time = split(c.time_ns, weights);
    let samples = split(c.cpu_samples, weights);
    let ns = split(c.cpu_ns, weights);
    (0..weights.len())
        .map(|i| Cost {
            calls: calls[i],
            time_ns: time[i],
            cpu_samples: samples[i],
            cpu_ns: ns[i],
            ..Default::default()
        })
        .collect()
}

/// At most this many estimated call paths per function (the likeliest; their shares renormalized).
const MAX_PATHS: usize = 64;
/// Paths are not extended above this depth (their top becomes a root).
const MAX_DEPTH: usize = 256;

/// Estimated call paths of functions from a caller/callee summary: a function's paths are its
/// callers' paths extended by it, each caller weighted by its share of the function (calls or
/// inclusive samples); a function without callers is a root. A caller already on the path being
/// built (recursion) is left out.
struct Paths<'a> {
    callers_of: &'a HashMap<FrameId, Vec<(FrameId, f64)>>,
    memo: HashMap<FrameId, Rc<Vec<(StackId, f64)>>>,
    visiting: Vec<FrameId>,
}

impl Paths<'_> {
    /// The paths ending in `f`, each with its share (the shares sum to 1).
    fn of(&mut self, b: &mut Builder, f: FrameId, depth: usize) -> Rc<Vec<(StackId, f64)>> {
        if let Some(p) = self.memo.get(&f) {
            return p.clone();
        }
        let root = |b: &mut Builder| Rc::new(b.stack(&[f]).map(|s| vec![(s, 1.0)]).unwrap_or_default());
        if depth >= MAX_DEPTH || self.visiting.contains(&f) {
            return root(b);
        }
        let callers: Vec<(FrameId, f64)> = self
            .callers_of
            .get(&f)
            .map(|v| v.iter().copied().filter(|(c, _)| *c != f && !self.visiting.contains(c)).collect())
            .unwrap_or_default();
        if callers.is_empty() {
            let r = root(b);
            self.memo.insert(f, r.clone());
            return r;
        }
        self.visiting.push(f);
        let sum: f64 = callers.iter().map(|&(_, w)| w).sum();
        let n = callers.len() as f64;
        let mut out: Vec<(StackId, f64)> = Vec::new();
        for (c, w) in callers {
            let share = if sum > 0.0 && sum.is_finite() { w / sum } else { 1.0 / n };
            for &(s, part) in self.of(b, c, depth + 1).iter() {
                let st = b.call(s, f);
                match out.iter_mut().find(|(x, _)| *x == st) {
                    Some(e) => e.1 += part * share,
                    None => out.push((st, part * share)),
                }
            }
        }
        self.visiting.pop();
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        out.truncate(MAX_PATHS);
        let total: f64 = out.iter().map(|&(_, p)| p).sum();
        if total > 0.0 && total.is_finite() {
            for e in &mut out {
                e.1 /= total;
            }
        }
        let r = if out.is_empty() { root(b) } else { Rc::new(out) };
        self.memo.insert(f, r.clone());
        r
    }
}

fn caller_callee(rd: &Reader<'_>, b: &mut Builder, body: &[Vec<String>]) -> Result<&'static str, ImportError> {
    let kind_col = rd.c.kind.unwrap_or(0);
    // Blocks as the seed describes them: a Root row, then its Caller and Callee rows (rows
    // before the first Root belong to it). With a 'Root Function Name' column, callers go to the
    // root they name wherever they are.
    struct Block {
        root: FrameId,
        excl: Cost,
        callers: Vec<(FrameId, f64)>,
    }
    let mut blocks: Vec<Block> = Vec::new();
    let mut pending: Vec<(FrameId, f64, Option<String>)> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    for (i, r) in body.iter().enumerate() {
        let line = i + 2;
        let kind = r.get(kind_col).map(|s| s.as_str()).unwrap_or("");
        let Some(kind) = row_type(kind) else {
            return Err(ImportError(format!(
                "vsperfreport CSV, record {line}: type '{}' is not Root, Caller or Callee",
                kind.trim()
            )));
        };
        let f = rd.frame(b, r);
        let v = rd.values(r, line)?;
        match kind {
            RowType::Root => {
                let name = r.get(rd.c.name).map(|s| s.trim().to_string()).unwrap_or_default();
                by_name.entry(name).or_insert(blocks.len());
                blocks.push(Block { root: f, excl: v.excl, callers: Vec::new() });
                let here = blocks.len() - 1;
                for (cf, w, _) in pending.drain(..) {
                    blocks[here].callers.push((cf, w));
                }
            }
            RowType::Caller => {
                let root = rd.c.root_name.and_then(|i| r.get(i)).map(|s| s.trim().to_string());
                let weight = if rd.c.sampled() { v.weight } else { v.calls as f64 };
                match (&root, blocks.last_mut()) {
                    (Some(_), _) => pending.push((f, weight, root)),
                    (None, Some(last)) => last.callers.push((f, weight)),
                    (None, None) => pending.push((f, weight, None)),
                }
            }
            RowType::Callee => {}
        }
        // With root names, callers are placed once their root is known.
        if rd.c.root_name.is_some() {
            let mut keep = Vec::new();
            for (cf, w, root) in pending.drain(..) {
                match root.as_ref().and_then(|n| by_name.get(n)) {
                    Some(&k) => blocks[k].callers.push((cf, w)),
                    None => keep.push((cf, w, root)),
                }
            }
            pending = keep;
        }
    }
    // Callers per function (a function's first Root block), merged by caller.
    let mut callers_of: HashMap<FrameId, Vec<(FrameId, f64)>> = HashMap::new();
    for bl in &blocks {
        let v = callers_of.entry(bl.root).or_default();
        for &(c, w) in &bl.callers {
            match v.iter_mut().find(|(f, _)| *f == c) {
                Some(e) => e.1 += w,
                None => v.push((c, w)),
            }
        }
    }
    let mut paths = Paths { callers_of: &callers_of, memo: HashMap::new(), visiting: Vec::new() };
    for bl in &blocks {
        let ps = paths.of(b, bl.root, 0);
        let weights: Vec<f64> = ps.iter().map(|&(_, f)| f).collect();
        for ((s, _), part) in ps.iter().zip(split_cost(&bl.excl, &weights)) {
            b.add(*s, &part);
        }
    }
    Ok("CallerCallee")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_both_locales() {
        assert_eq!(number("8,735", false), Some(8735.0));
        assert_eq!(number("8.735", true), Some(8735.0));
        assert_eq!(number("100,00", true), Some(100.0));
        assert_eq!(number("1.234,5", true), Some(1234.5));
        assert_eq!(number("1,234.5", false), Some(1234.5));
        assert_eq!(number("", false), Some(0.0));
        assert_eq!(number("-1", false), None);
        assert_eq!(number("abc", false), None);
        assert_eq!(number("1e999", false), None);
    }

    #[test]
    fn csv_records_with_quotes() {
        let r = records("a,\"b,c\",\"say \"\"hi\"\"\",\r\n\n1,2\n");
        assert_eq!(r, vec![vec!["a", "b,c", "say \"hi\"", ""], vec!["1", "2"]]);
    }

    #[test]
    fn huge_or_odd_values_are_refused_or_read_without_panic() {
        let opts = ImportOptions::default();
        let e = read(b"Level,Function Name,Number of Calls,Elapsed Exclusive Time\n1,a,1,1e300\n2,b,1,1e300\n", &opts)
            .unwrap_err();
        assert!(e.0.contains("add up to more than"), "{}", e.0);
        // Levels that jump, go back below the first one, or are huge nest as far as they can.
        let p = read(b"Level,Function Name,Exclusive Samples\n5,a,1\n99999999999,b,2\n0,c,3\n", &opts).unwrap();
        assert_eq!(clrprof_query::select::totals(&p).cpu_samples, 6);
        assert_eq!(p.costs.stacks.nodes.len(), 3);
    }

    #[test]
    fn splits_sum_exactly() {
        assert_eq!(split(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
        assert_eq!(split(7, &[0.0, 0.0]), vec![4, 3]);
        assert_eq!(split(5, &[3.0, 1.0]), vec![4, 1]);
        // Huge values do not panic (f64 rounding may lose a few units).
        assert_eq!(split(u64::MAX, &[1.0, 1.0]).len(), 2);
    }
}
