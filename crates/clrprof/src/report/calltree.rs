//! `--view calltree`: the indented top-down call tree with counts, inclusive/exclusive cost and
//! share of the total; merged over threads or one tree per thread (`--by-thread`).

use anyhow::Result;
use clrprof_model::views::{call_tree, TreeNode};
use clrprof_model::{Metric, Profile};

use super::select::{self, fmt_value, percent, thread_label};
use super::table::{Align::*, TextTable};
use super::{title, ReportOptions};

pub fn render(p: &Profile, opts: &ReportOptions) -> Result<String> {
    let m = select::metric(p, opts.weight);
    let names = select::display_names(p);
    let sel = select::threads(p, opts.thread.as_deref())?;
    let mut out = title(p, "call tree");
    out += &select::weight_note(p, m);
    out += "\n";
    let groups = select::thread_groups(p, opts.by_thread, &sel);
    for g in groups {
        let (nodes, roots) = match (g, &sel) {
            (Some(t), _) => call_tree(&p.costs, Some(&|x| x == t)),
            (None, Some(s)) => call_tree(&p.costs, Some(&|x| s.contains(&x))),
            (None, None) => call_tree(&p.costs, None),
        };
        let total: u64 = roots.iter().map(|&r| m.of(&nodes[r].inclusive)).sum();
        let label = match g {
            Some(t) => format!("thread {}", thread_label(p, t)),
            None => {
                opts.thread.as_ref().map(|t| format!("thread {t}")).unwrap_or_else(|| "all threads (merged)".into())
            }
        };
        out += &format!("\n{label}: total {}\n", fmt_value(m, total));
        let instrumented = matches!(m, Metric::Time | Metric::Calls);
        let unit = if select::is_time(m) { "ms".to_string() } else { m.name().to_string() };
        let (h_incl, h_excl) = (format!("INCL {unit}"), format!("EXCL {unit}"));
        let mut t = TextTable::new(&[
            ("INCL %", Right),
            (h_incl.as_str(), Right),
            (h_excl.as_str(), Right),
            (if instrumented { "CALLS" } else { "SAMPLES" }, Right),
            ("FUNCTION", Left),
        ]);
        let mut order: Vec<usize> = roots.clone();
        sort_children(p, &nodes, &mut order, m);
        let mut stack: Vec<(usize, usize)> = order.into_iter().rev().map(|n| (n, 0)).collect();
        while let Some((n, depth)) = stack.pop() {
            let node = &nodes[n];
            let v = m.of(&node.inclusive);
            if total > 0 && (v as f64) * 100.0 / (total as f64) < opts.min_percent {
                continue;
            }
            let count = match m {
                Metric::Time | Metric::Calls => node.self_cost.calls,
                Metric::Cpu => node.inclusive.cpu_samples,
                Metric::Wall => node.inclusive.wall_samples,
                _ => node.inclusive.alloc_count,
            };
            t.row(vec![
                percent(v, total),
                fmt_value(m, v),
                fmt_value(m, m.of(&node.self_cost)),
                count.to_string(),
                format!("{}{}", "  ".repeat(depth), names[node.frame.0 as usize]),
            ]);
            if opts.depth.map(|d| depth + 1 < d).unwrap_or(true) {
                let mut kids = node.children.clone();
                sort_children(p, &nodes, &mut kids, m);
                for k in kids.into_iter().rev() {
                    stack.push((k, depth + 1));
                }
            }
        }
        out += &t.render();
    }
    Ok(out)
}

fn sort_children(p: &Profile, nodes: &[TreeNode], v: &mut [usize], m: Metric) {
    let frames = &p.costs.stacks.frames;
    v.sort_by(|&a, &b| {
        m.of(&nodes[b].inclusive)
            .cmp(&m.of(&nodes[a].inclusive))
            .then(frames[nodes[a].frame.0 as usize].name.cmp(&frames[nodes[b].frame.0 as usize].name))
            .then(nodes[a].stack.cmp(&nodes[b].stack))
    });
}
