//! Hot source lines. In a profile built with lines every managed frame is a function at a line
//! (`Frame::line`), so a line's figures are the engine's per-frame totals
//! ([`crate::costs::function_rows`]): `self` with the line on top of the stack, `total` with it
//! anywhere on the stack (a caller's line is its call site). Nothing is aggregated a second time.
//! [`lines`] is `report --view lines`; [`function_lines`] the per-line costs of one method, for
//! `report --view source` and the viewer's source panel.

use std::collections::BTreeMap;

use clrprof_model::{Cost, FrameId, FrameKey, Metric, Profile};
use serde::Serialize;

use crate::costs::{function_rows, CostQuery, FunctionRow};
use crate::select::{self, find_functions, function_names, Threads};
use crate::{QueryError, Result, SaturatingSum};

/// One line of one function with its costs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LineStats {
    pub frame: FrameId,
    /// The function's display name (without the line).
    pub function: String,
    /// Module file name, empty when unknown.
    pub module: String,
    /// The source file as the PDB names it.
    pub file: String,
    pub line: u32,
    pub self_cost: Cost,
    pub total: Cost,
}

/// `--view lines`: the hottest lines of the selection, for one weight.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LinesView {
    pub metric: Metric,
    /// The weight's self value over every frame of the selection (lines or not).
    pub total: u64,
    /// The part of `total` in frames without a line (native code, runtime work, methods whose
    /// module has no PDB and no known first line).
    pub without_line: u64,
    /// Rows before `top` cut them.
    pub count: usize,
    pub rows: Vec<LineStats>,
}

/// True when some frame of the profile has a source line.
pub fn has_lines(p: &Profile) -> bool {
    p.costs.stacks.frames.iter().any(|f| f.line.is_some())
}

fn no_lines() -> QueryError {
    QueryError::NoData(
        "this profile has no source lines: the trace has no IL-to-native maps (recorded by clrprof before \
         source lines), or no frame could be resolved to a line"
            .into(),
    )
}

fn line_stats(p: &Profile, names: &[String], r: &FunctionRow) -> Option<LineStats> {
    let f = &p.costs.stacks.frames[r.frame.0 as usize];
    let l = f.line.as_ref()?;
    Some(LineStats {
        frame: r.frame,
        function: names[r.frame.0 as usize].clone(),
        module: f.module.clone(),
        file: l.file.clone(),
        line: l.line,
        self_cost: r.self_cost,
        total: r.inclusive,
    })
}

/// The frames of the managed functions the user named (every line of each), matched on the names
/// without lines ([`select::find_functions`]). Other frames (the runtime's work for a method,
/// `[JIT] Name`; native code) have no lines and make no name ambiguous here.
fn named_frames(p: &Profile, names: &[String], wanted: &str) -> Result<Vec<FrameId>> {
    let managed: Vec<String> = names
        .iter()
        .zip(&p.costs.stacks.frames)
        .map(|(n, f)| if matches!(f.key, FrameKey::Function(_)) { n.clone() } else { String::new() })
        .collect();
    find_functions(p, &managed, wanted)
}

/// Hot lines: every line with a cost for the weight, by self value (then total, function, file,
/// line); of the functions matching `function` only when given.
pub fn lines(p: &Profile, q: &CostQuery, function: Option<&str>) -> Result<LinesView> {
    if !has_lines(p) {
        return Err(no_lines());
    }
    let m = select::metric(p, q.metric);
    let names = function_names(p);
    let rows = function_rows(p, &q.threads);
    let total = rows.iter().map(|r| m.of(&r.self_cost)).saturating_sum();
    let without_line = rows
        .iter()
        .filter(|r| p.costs.stacks.frames[r.frame.0 as usize].line.is_none())
        .map(|r| m.of(&r.self_cost))
        .saturating_sum();
    let targets = function.map(|f| named_frames(p, &names, f)).transpose()?;
    let mut out: Vec<LineStats> = rows
        .iter()
        .filter(|r| targets.as_ref().is_none_or(|t| t.contains(&r.frame)))
        .filter(|r| m.of(&r.self_cost) > 0 || m.of(&r.inclusive) > 0)
        .filter_map(|r| line_stats(p, &names, r))
        .collect();
    out.sort_by(|a, b| {
        m.of(&b.self_cost)
            .cmp(&m.of(&a.self_cost))
            .then(m.of(&b.total).cmp(&m.of(&a.total)))
            .then(a.function.cmp(&b.function))
            .then(a.file.cmp(&b.file))
            .then(a.line.cmp(&b.line))
            .then(a.frame.cmp(&b.frame))
    });
    let count = out.len();
    out.truncate(q.top.unwrap_or(count));
    Ok(LinesView { metric: m, total, without_line, count, rows: out })
}

/// One line's costs in a method: `self` on it, `total` with it on the stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct LineCost {
    pub line: u32,
    pub self_cost: Cost,
    pub total: Cost,
}

/// The per-line costs of one method, and what finds its source.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FunctionLines {
    pub metric: Metric,
    /// Display name.
    pub function: String,
    /// The runtime's FunctionID, when the frame is a managed function.
    pub function_id: Option<u64>,
    /// The method's metadata token and its module's path (what the PDB is looked up by); 0 and
    /// empty when unknown.
    pub token: u32,
    pub module_path: String,
    /// The source file most of the method's lines are in (the PDB's document path).
    pub file: String,
    /// By line number; lines in another file (an inlined method's) are left out.
    pub lines: Vec<LineCost>,
    /// The method's own figures: self over all its lines (and frames without a line), total
    /// with it anywhere on the stack.
    pub self_cost: Cost,
    pub total: Cost,
    /// The selection's whole self value, for percentages.
    pub grand_total: u64,
}

/// The per-line costs of the one method `wanted` names (every overload must be told apart: an
/// ambiguous name is an error that lists them).
pub fn function_lines(p: &Profile, metric: Option<Metric>, threads: &Threads, wanted: &str) -> Result<FunctionLines> {
    if !has_lines(p) {
        return Err(no_lines());
    }
    let m = select::metric(p, metric);
    let names = function_names(p);
    let frames = named_frames(p, &names, wanted)?;
    let st = &p.costs.stacks;
    let mut distinct: Vec<&str> = frames.iter().map(|f| names[f.0 as usize].as_str()).collect();
    distinct.sort();
    distinct.dedup();
    if distinct.len() > 1 {
        return Err(QueryError::AmbiguousFunction {
            wanted: wanted.into(),
            count: distinct.len(),
            shown: distinct.join(", "),
        });
    }
    let function = distinct[0].to_string();
    let function_id = frames.iter().find_map(|f| match st.frames[f.0 as usize].key {
        FrameKey::Function(id) => Some(id),
        _ => None,
    });
    let info = function_id.and_then(|id| p.functions.iter().find(|f| f.id == id));
    let token = info.map_or(0, |f| f.token);
    let module_path = info.and_then(|f| p.module(f.module)).map(|m| m.path.clone()).unwrap_or_default();
    let rows = function_rows(p, threads);
    let grand_total = rows.iter().map(|r| m.of(&r.self_cost)).saturating_sum();
    // The method's total counts a stack once however many of its lines are on it: from the
    // engine's per-path totals of a "function" made of all its frames.
    let total = method_total(p, threads, &frames);
    let mut self_cost = Cost::default();
    let mut by_file: BTreeMap<&str, BTreeMap<u32, LineCost>> = BTreeMap::new();
    let mut file_weight: BTreeMap<&str, u64> = BTreeMap::new();
    for r in rows.iter().filter(|r| frames.contains(&r.frame)) {
        self_cost.add(&r.self_cost);
        let Some(l) = &st.frames[r.frame.0 as usize].line else { continue };
        let e = by_file.entry(l.file.as_str()).or_default().entry(l.line).or_default();
        e.line = l.line;
        e.self_cost.add(&r.self_cost);
        e.total.add(&r.inclusive);
        *file_weight.entry(l.file.as_str()).or_default() += 1 + m.of(&r.inclusive);
    }
    // The method's own file: the one with the most weight (ties: the first by name).
    let file = file_weight.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))).map(|(f, _)| f.to_string());
    let file = file.unwrap_or_default();
    let lines = by_file.remove(file.as_str()).map(|l| l.into_values().collect()).unwrap_or_default();
    Ok(FunctionLines {
        metric: m,
        function,
        function_id,
        token,
        module_path,
        file,
        lines,
        self_cost,
        total,
        grand_total,
    })
}

/// The cost of the stacks with any of `frames` on them, each stack counted once.
fn method_total(p: &Profile, threads: &Threads, frames: &[FrameId]) -> Cost {
    use crate::engine::PathSource;
    let mut total = Cost::default();
    crate::costs::frame_paths(p, threads).each_path(&mut |path, w| {
        if path.iter().any(|f| frames.contains(&FrameId(*f))) {
            total.add(w);
        }
    });
    total
}

/// A method's source as the reader found it: the file's text (from disk or embedded in the PDB),
/// or where it lives (Source Link) when the file is not on this machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SourceText {
    /// The document path the PDB gives.
    pub path: String,
    /// The whole file, when found.
    pub text: Option<String>,
    /// Where the text came from: `disk`, `embedded` (the PDB's embedded source), or empty.
    pub origin: String,
    /// The file's URL by the PDB's Source Link map, when it has one.
    pub source_link: Option<String>,
    /// The lines the method's sequence points start on (its extent in the file).
    pub method_lines: Vec<u32>,
}

/// One line of an annotated method: its text (when known) and costs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct AnnotatedLine {
    pub line: u32,
    pub text: Option<String>,
    pub self_cost: Cost,
    pub total: Cost,
}

/// Lines of context shown above a method's first line (its signature) and below its last.
const CONTEXT_BEFORE: u32 = 2;
const CONTEXT_AFTER: u32 = 1;

/// The method's lines with their costs, like `perf annotate`: with the text, every line of the
/// method's extent (its sequence points and its costed lines, with a little context); without it,
/// the lines with a cost.
pub fn annotate(fl: &FunctionLines, src: Option<&SourceText>) -> Vec<AnnotatedLine> {
    let cost = |line: u32| fl.lines.iter().find(|l| l.line == line);
    let row = |line: u32, text: Option<String>| {
        let c = cost(line);
        AnnotatedLine {
            line,
            text,
            self_cost: c.map(|c| c.self_cost).unwrap_or_default(),
            total: c.map(|c| c.total).unwrap_or_default(),
        }
    };
    let Some(text) = src.and_then(|s| s.text.as_deref()) else {
        return fl.lines.iter().map(|l| row(l.line, None)).collect();
    };
    let file: Vec<&str> = text.lines().collect();
    let extent = fl.lines.iter().map(|l| l.line).chain(src.into_iter().flat_map(|s| s.method_lines.iter().copied()));
    let extent = extent.filter(|&l| l >= 1 && l as usize <= file.len());
    let (Some(lo), Some(hi)) = (extent.clone().min(), extent.max()) else {
        return fl.lines.iter().map(|l| row(l.line, None)).collect();
    };
    let lo = lo.saturating_sub(CONTEXT_BEFORE).max(1);
    let hi = (hi + CONTEXT_AFTER).min(file.len() as u32);
    let mut out: Vec<AnnotatedLine> =
        (lo..=hi).map(|l| row(l, Some(file[l as usize - 1].trim_end().to_string()))).collect();
    // Costed lines past the end of the file (a stale file): kept, without text.
    for l in fl.lines.iter().filter(|l| l.line < lo || l.line > hi) {
        out.push(row(l.line, None));
    }
    out.sort_by_key(|l| l.line);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clrprof_model::{Function, Module, SourceLine};

    /// Main (Program.cs:5) → Work at lines 10 (3 samples) and 12 (1 sample) and calls Helper from
    /// line 11 (2 samples, at Helper's line 20); a native frame on top of Work:10 once.
    pub(crate) fn profile() -> Profile {
        let mut p = Profile::default();
        p.modules.push(Module { id: 1, path: "/app/App.dll".into(), ..Default::default() });
        for (id, name, token) in
            [(100u64, "App.Main", 0x0600_0001u32), (200, "App.Work", 0x0600_0002), (300, "App.Helper", 3)]
        {
            p.functions.push(Function { id, name: name.into(), token, module: 1, ..Default::default() });
        }
        let st = &mut p.costs.stacks;
        let mut frame = |id: u64, name: &str, line: u32, file: &str| {
            // A profile with lines has one frame per (function, line): stand-in keys here.
            let f = st.intern_frame(FrameKey::Label(format!("{name}:{line}")));
            let fr = &mut st.frames[f.0 as usize];
            fr.key = FrameKey::Function(id);
            fr.kind = clrprof_model::FrameKind::Managed;
            fr.name = name.into();
            fr.module = "App.dll".into();
            fr.line = Some(SourceLine { file: file.into(), line });
            f
        };
        let main = frame(100, "App.Main", 5, "/src/Program.cs");
        let w10 = frame(200, "App.Work", 10, "/src/Work.cs");
        let w11 = frame(200, "App.Work", 11, "/src/Work.cs");
        let w12 = frame(200, "App.Work", 12, "/src/Work.cs");
        let h20 = frame(300, "App.Helper", 20, "/src/Work.cs");
        let native = st.intern_frame(FrameKey::Native { module: "libc.so.6".into(), symbol: "memcpy".into() });
        let cpu = |n: u64| Cost { cpu_samples: n, cpu_ns: n * 1_000_000, ..Default::default() };
        for (path, n) in
            [(vec![main, w10], 3), (vec![main, w12], 1), (vec![main, w11, h20], 2), (vec![main, w10, native], 1)]
        {
            let s = p.costs.stacks.intern_stack(&path).unwrap();
            p.costs.add(7, s, &cpu(n));
        }
        p
    }

    #[test]
    fn lines_rank_by_self_with_call_sites_in_total() {
        let p = profile();
        let v = lines(&p, &CostQuery::default(), None).unwrap();
        assert_eq!(v.metric, Metric::Cpu);
        assert_eq!((v.total, v.without_line), (7_000_000, 1_000_000));
        let got: Vec<(&str, u32, u64, u64)> = v
            .rows
            .iter()
            .map(|r| (r.function.as_str(), r.line, r.self_cost.cpu_samples, r.total.cpu_samples))
            .collect();
        assert_eq!(
            got,
            [
                ("App.Work", 10, 3, 4),
                ("App.Helper", 20, 2, 2),
                ("App.Work", 12, 1, 1),
                ("App.Main", 5, 0, 7),
                ("App.Work", 11, 0, 2)
            ]
        );
        let only = lines(&p, &CostQuery { top: Some(1), ..Default::default() }, Some("App.Work")).unwrap();
        // The runtime's work for a method (`[JIT] App.Work`) makes no name ambiguous.
        let mut with_jit = profile();
        with_jit.costs.stacks.intern_frame(FrameKey::Label("[JIT] App.Work".into()));
        assert_eq!(lines(&with_jit, &CostQuery::default(), Some("Work")).unwrap().count, 3);
        assert!(function_lines(&with_jit, None, &Threads::all(), "Work").is_ok());
        assert_eq!((only.count, only.rows.len(), only.rows[0].line), (3, 1, 10));
        assert!(matches!(lines(&p, &CostQuery::default(), Some("Nope")), Err(QueryError::NoSuchFunction(_))));
    }

    #[test]
    fn one_method_per_line_with_its_own_total_counted_once() {
        let p = profile();
        let f = function_lines(&p, None, &Threads::all(), "App.Work").unwrap();
        assert_eq!((f.function.as_str(), f.token, f.module_path.as_str()), ("App.Work", 0x0600_0002, "/app/App.dll"));
        assert_eq!(f.file, "/src/Work.cs");
        let got: Vec<(u32, u64, u64)> =
            f.lines.iter().map(|l| (l.line, l.self_cost.cpu_samples, l.total.cpu_samples)).collect();
        assert_eq!(got, [(10, 3, 4), (11, 0, 2), (12, 1, 1)]);
        assert_eq!((f.self_cost.cpu_samples, f.total.cpu_samples, f.grand_total), (4, 7, 7_000_000));
    }

    #[test]
    fn annotation_spans_the_method_with_context_or_only_costed_lines() {
        let p = profile();
        let f = function_lines(&p, None, &Threads::all(), "App.Work").unwrap();
        let text: String = (1..=15).map(|i| format!("line {i}  \n")).collect();
        let src =
            SourceText { path: f.file.clone(), text: Some(text), method_lines: vec![9, 13], ..Default::default() };
        let a = annotate(&f, Some(&src));
        assert_eq!(a.iter().map(|l| l.line).collect::<Vec<_>>(), (7..=14).collect::<Vec<_>>());
        assert_eq!(a[3].text.as_deref(), Some("line 10"));
        assert_eq!((a[3].self_cost.cpu_samples, a[3].total.cpu_samples), (3, 4));
        let bare = annotate(&f, None);
        assert_eq!(
            bare.iter().map(|l| (l.line, l.text.is_none())).collect::<Vec<_>>(),
            [(10, true), (11, true), (12, true)]
        );
        // A file shorter than the lines (stale): the lines past its end keep their costs.
        let short = SourceText { text: Some("a\nb\n".into()), ..src };
        assert_eq!(annotate(&f, Some(&short)).len(), 3);
    }

    #[test]
    fn a_profile_without_lines_says_so() {
        let mut p = profile();
        for f in &mut p.costs.stacks.frames {
            f.line = None;
        }
        let e = lines(&p, &CostQuery::default(), None).unwrap_err();
        assert!(e.to_string().contains("no source lines"), "{e}");
        assert!(function_lines(&p, None, &Threads::all(), "App.Work").is_err());
    }

    #[test]
    fn display_names_carry_the_line_and_function_names_do_not() {
        let mut p = profile();
        // One function's frames (its lines, and the whole function where no line is known) are one
        // function: no parameter list to tell them apart.
        let whole = p.costs.stacks.intern_frame(FrameKey::Function(200));
        p.costs.stacks.frames[whole.0 as usize].name = "App.Work".into();
        for f in p.costs.stacks.frames.iter_mut().filter(|f| f.name == "App.Work") {
            f.signature = "uint64 App.Work (int64)".into();
        }
        assert_eq!(select::display_names(&p)[whole.0 as usize], "App.Work");
        let d = select::display_names(&p);
        let f = function_names(&p);
        assert_eq!(d[1], "App.Work (Work.cs:10)");
        assert_eq!(f[1], "App.Work");
        assert_eq!(select::file_name("C:\\src\\A.cs"), "A.cs");
    }
}
