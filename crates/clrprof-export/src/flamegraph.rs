//! Self-contained flame graphs: a static SVG (tooltips on every frame) and an HTML page with the
//! same graph plus click-to-zoom and search. Stacks merged over the selected threads; frame widths
//! are samples; siblings sorted by name (as `flamegraph.pl`), so output is deterministic.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write;

use clrprof_model::{FrameId, FrameKind};
use clrprof_query::engine::{self, FuncId, Measure, Paths};

use super::{ExportInput, Exporter, Result};

const WIDTH: f64 = 1200.0;
const ROW: f64 = 17.0;
const TOP: f64 = 44.0;
/// Frames narrower than this (pixels) are left out.
const MIN_WIDTH: f64 = 0.2;

/// One drawn frame: depth, x and width as fractions of the total.
struct Rect {
    depth: usize,
    x: f64,
    w: f64,
    frame: FrameId,
    samples: u64,
    value: u64,
}

/// The merged stacks' tree (the engine's prefix tree of the stacks as paths of frame names: same
/// names under one parent are one frame, as `flamegraph.pl` merges them), children by name, each
/// node drawn with the frame of the first stack through it.
fn layout(inp: &ExportInput<'_>) -> (Vec<Rect>, u64, usize) {
    let mut ids: HashMap<std::borrow::Cow<'_, str>, FuncId> = HashMap::new();
    let mut names: Vec<std::borrow::Cow<'_, str>> = Vec::new();
    let mut paths: Paths<Measure> = Paths::merging();
    // The frames of each path's first stack.
    let mut first: Vec<&[FrameId]> = Vec::new();
    let mut buf = Vec::new();
    for s in &inp.stacks.merged {
        buf.clear();
        for &f in &s.frames {
            let name = inp.frame_name(f);
            let id = *ids.entry(name.clone()).or_insert_with(|| {
                names.push(name);
                (names.len() - 1) as FuncId
            });
            buf.push(id);
        }
        let known = paths.len();
        paths.add(&buf, &Measure { value: s.value, count: s.samples });
        if paths.len() > known {
            first.push(&s.frames);
        }
    }
    let mut tree = engine::prefix_tree(&paths, false);
    let name = |nodes: &[engine::TreeNode<Measure>], n: u32| &names[nodes[n as usize].func as usize];
    tree.sort_children(|nodes, a, b| name(nodes, a).cmp(name(nodes, b)));
    let mut frame: Vec<Option<FrameId>> = vec![None; tree.nodes.len()];
    for (i, frames) in first.iter().enumerate() {
        let mut n = 0u32;
        for (&f, &fr) in paths.path(i).iter().zip(frames.iter()) {
            let kids = tree.children(n);
            let Ok(k) = kids.binary_search_by(|&c| name(&tree.nodes, c).cmp(&names[f as usize])) else { break };
            n = kids[k];
            frame[n as usize].get_or_insert(fr);
        }
    }
    let root = tree.nodes[0].total;
    let total = root.count.max(1);
    let mut rects = Vec::new();
    let mut max_depth = 0;
    let mut walk_state = Walk { tree: &tree, frame: &frame, total, rects: &mut rects, max_depth: &mut max_depth };
    walk_state.walk(0, 0, 0.0);
    (rects, root.count, max_depth + 1)
}

struct Walk<'a> {
    tree: &'a engine::Tree<Measure>,
    frame: &'a [Option<FrameId>],
    total: u64,
    rects: &'a mut Vec<Rect>,
    max_depth: &'a mut usize,
}

impl Walk<'_> {
    fn walk(&mut self, n: u32, depth: usize, x: f64) {
        let mut cx = x;
        for &c in self.tree.children(n) {
            let node = &self.tree.nodes[c as usize];
            let w = node.total.count as f64 / self.total as f64;
            if w * WIDTH >= MIN_WIDTH {
                let frame = self.frame[c as usize].unwrap_or(FrameId(0));
                self.rects.push(Rect { depth, x: cx, w, frame, samples: node.total.count, value: node.total.value });
                *self.max_depth = (*self.max_depth).max(depth);
                self.walk(c, depth + 1, cx);
            }
            cx += w;
        }
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A stable warm colour for managed code, cool for native, grey for unknown frames.
fn color(kind: FrameKind, name: &str) -> String {
    let h = name.bytes().fold(2166136261u32, |h, b| (h ^ b as u32).wrapping_mul(16777619));
    let v = (h % 60) as i32;
    match kind {
        FrameKind::Managed => format!("rgb({},{},{})", 225 + v / 3, 90 + v * 2, 40 + v / 2),
        FrameKind::Native => format!("rgb({},{},{})", 60 + v, 140 + v, 200 + v / 2),
        FrameKind::Synthetic => format!("rgb({},{},{})", 170 + v / 2, 170 + v / 2, 170 + v / 2),
    }
}

fn svg(inp: &ExportInput<'_>, interactive: bool) -> String {
    let (rects, total, depth) = layout(inp);
    let height = TOP + depth as f64 * ROW + 24.0;
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" id="flame" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Verdana, sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r##"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#f8f8f8"/>"##);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="20" text-anchor="middle" font-size="15">{}</text>"#,
        WIDTH / 2.0,
        escape(&inp.title())
    );
    let _ = writeln!(
        s,
        r##"<text x="10" y="36" font-size="11" fill="#555">{} samples{}; width = samples, hover for details</text>"##,
        total,
        if interactive { "; click a frame to zoom, click the title bar to reset" } else { "" }
    );
    for r in &rects {
        let fr = &inp.profile.costs.stacks.frames[r.frame.0 as usize];
        let name = inp.frame_name(r.frame);
        let x = r.x * WIDTH;
        let w = r.w * WIDTH;
        let y = height - 24.0 - (r.depth as f64 + 1.0) * ROW;
        let pct = r.samples as f64 * 100.0 / total.max(1) as f64;
        let ms = r.value as f64 / 1e6;
        let chars = ((w - 6.0) / 7.0).floor().max(0.0) as usize;
        let label: String = if name.chars().count() <= chars {
            name.to_string()
        } else if chars >= 3 {
            name.chars().take(chars - 2).collect::<String>() + ".."
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            r#"<g class="f" data-x="{:.6}" data-w="{:.6}" data-d="{}"><title>{} ({} samples, {:.2}%, {:.1} ms)</title><rect x="{x:.2}" y="{y:.1}" width="{:.2}" height="{}" rx="2" fill="{}"/><text x="{:.2}" y="{:.1}">{}</text></g>"#,
            r.x,
            r.w,
            r.depth,
            escape(&name),
            r.samples,
            pct,
            ms,
            (w - 0.5).max(0.1),
            ROW - 1.0,
            color(fr.kind, &fr.name),
            x + 3.0,
            y + ROW - 5.0,
            escape(&label)
        );
    }
    s.push_str("</svg>\n");
    s
}

pub struct FlameSvg;

impl Exporter for FlameSvg {
    fn extension(&self) -> &'static str {
        "svg"
    }

    fn stacks_needed(&self) -> clrprof_query::weighted_stacks::Needed {
        clrprof_query::weighted_stacks::Needed::Merged
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        out.write_all(r#"<?xml version="1.0" standalone="no"?>"#.as_bytes())?;
        out.write_all(b"\n")?;
        out.write_all(svg(inp, false).as_bytes())?;
        Ok(())
    }
}

pub struct FlameHtml;

const SCRIPT: &str = r#"
const W = 1200, frames = Array.from(document.querySelectorAll('g.f'));
function zoom(x0, w0, d0) {
  for (const g of frames) {
    const x = +g.dataset.x, w = +g.dataset.w, d = +g.dataset.d;
    const inside = x >= x0 - 1e-9 && x + w <= x0 + w0 + 1e-9;
    const above = d < d0 && x <= x0 + 1e-9 && x + w >= x0 + w0 - 1e-9;
    const show = inside || above;
    g.style.display = show ? '' : 'none';
    if (!show) continue;
    const nx = above ? 0 : (x - x0) / w0 * W, nw = above ? W : w / w0 * W;
    const r = g.querySelector('rect'), t = g.querySelector('text');
    r.setAttribute('x', nx); r.setAttribute('width', Math.max(nw - 0.5, 0.1));
    t.setAttribute('x', nx + 3);
    const name = g.querySelector('title').textContent.replace(/ \([^)]*\)$/, '');
    const n = Math.floor((nw - 6) / 7);
    t.textContent = name.length <= n ? name : (n >= 3 ? name.slice(0, n - 2) + '..' : '');
  }
}
for (const g of frames) g.addEventListener('click', () => zoom(+g.dataset.x, +g.dataset.w, +g.dataset.d));
document.getElementById('reset').addEventListener('click', () => zoom(0, 1, 0));
document.getElementById('search').addEventListener('input', e => {
  const q = e.target.value.toLowerCase();
  for (const g of frames) {
    const hit = q && g.querySelector('title').textContent.toLowerCase().includes(q);
    g.querySelector('rect').style.stroke = hit ? '#d00' : '';
    g.querySelector('rect').style.strokeWidth = hit ? '2' : '';
  }
});
"#;

impl Exporter for FlameHtml {
    fn extension(&self) -> &'static str {
        "html"
    }

    fn stacks_needed(&self) -> clrprof_query::weighted_stacks::Needed {
        clrprof_query::weighted_stacks::Needed::Merged
    }

    fn write(&self, inp: &ExportInput<'_>, out: &mut dyn Write) -> Result<()> {
        let title = escape(&inp.title());
        write!(
            out,
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>\n<style>body{{font-family:Verdana,sans-serif;margin:12px}} g.f{{cursor:pointer}} g.f:hover rect{{stroke:#000;stroke-width:0.5}}</style>\n</head><body>\n<div><button id=\"reset\">Reset zoom</button> <input id=\"search\" placeholder=\"Search frames\" size=\"40\"></div>\n{}<script>{SCRIPT}</script>\n</body></html>\n",
            svg(inp, true)
        )?;
        Ok(())
    }
}
