//! Self-contained flame graphs: a static SVG (tooltips on every frame) and an HTML page with the
//! same graph plus click-to-zoom and search. Stacks merged over the selected threads; frame widths
//! are samples; siblings sorted by name (as `flamegraph.pl`), so output is deterministic.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;

use clrprof_model::{FrameId, FrameKind};

use super::{ExportInput, Exporter, Result};

const WIDTH: f64 = 1200.0;
const ROW: f64 = 17.0;
const TOP: f64 = 44.0;
/// Frames narrower than this (pixels) are left out.
const MIN_WIDTH: f64 = 0.2;

#[derive(Default)]
struct Node {
    samples: u64,
    value: u64,
    children: BTreeMap<String, (FrameId, Node)>,
}

/// One drawn frame: depth, x and width as fractions of the total.
struct Rect {
    depth: usize,
    x: f64,
    w: f64,
    frame: FrameId,
    samples: u64,
    value: u64,
}

fn layout(inp: &ExportInput<'_>) -> (Vec<Rect>, u64, usize) {
    let mut root = Node::default();
    for s in &inp.stacks.merged {
        root.samples += s.samples;
        root.value += s.value;
        let mut n = &mut root;
        for &f in &s.frames {
            let name = inp.frame_name(f).to_string();
            n = &mut n.children.entry(name).or_insert_with(|| (f, Node::default())).1;
            n.samples += s.samples;
            n.value += s.value;
        }
    }
    let total = root.samples.max(1);
    let mut rects = Vec::new();
    let mut max_depth = 0;
    fn walk(n: &Node, depth: usize, x: f64, total: u64, rects: &mut Vec<Rect>, max_depth: &mut usize) {
        let mut cx = x;
        for (f, c) in n.children.values() {
            let w = c.samples as f64 / total as f64;
            if w * WIDTH >= MIN_WIDTH {
                rects.push(Rect { depth, x: cx, w, frame: *f, samples: c.samples, value: c.value });
                *max_depth = (*max_depth).max(depth);
                walk(c, depth + 1, cx, total, rects, max_depth);
            }
            cx += w;
        }
    }
    walk(&root, 0, 0.0, total, &mut rects, &mut max_depth);
    (rects, root.samples, max_depth + 1)
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
        let x = r.x * WIDTH;
        let w = r.w * WIDTH;
        let y = height - 24.0 - (r.depth as f64 + 1.0) * ROW;
        let pct = r.samples as f64 * 100.0 / total.max(1) as f64;
        let ms = r.value as f64 / 1e6;
        let chars = ((w - 6.0) / 7.0).floor().max(0.0) as usize;
        let label: String = if fr.name.chars().count() <= chars {
            fr.name.clone()
        } else if chars >= 3 {
            fr.name.chars().take(chars - 2).collect::<String>() + ".."
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            r#"<g class="f" data-x="{:.6}" data-w="{:.6}" data-d="{}"><title>{} ({} samples, {:.2}%, {:.1} ms)</title><rect x="{x:.2}" y="{y:.1}" width="{:.2}" height="{}" rx="2" fill="{}"/><text x="{:.2}" y="{:.1}">{}</text></g>"#,
            r.x,
            r.w,
            r.depth,
            escape(&fr.name),
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
