//! Transforms of call paths (focus, merge, drop, collapse, just-my-code): what the viewer's views
//! and the diff apply to every stack before aggregating, so a transform means the same in both.
//! Functions are named by display name through a [`FuncTable`].

use clrprof_model::FrameKind;
use serde::{Deserialize, Serialize};

use super::FuncId;
use crate::{QueryError, Result};

/// One transform of the stacks. Functions are display names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case")]
pub enum Transform {
    /// Keep only stacks through `function`, starting at its outermost call (all call sites merged).
    FocusFunction { function: String },
    /// Keep only stacks that start with `path` (root first), starting at its last frame.
    FocusSubtree { path: Vec<String> },
    /// Remove `function`'s frames: its cost goes to its caller.
    Merge { function: String },
    /// Remove every stack that contains `function`.
    Drop { function: String },
    /// Consecutive frames of `module` become one frame `[module]`.
    CollapseModule { module: String },
    /// Consecutive frames in `namespace` (a name prefix) become one frame `namespace.*`.
    CollapseNamespace { namespace: String },
    /// `function` … `function` (direct or indirect recursion) becomes one `function` frame.
    CollapseRecursion { function: String },
    /// Fold `System.*` and `Microsoft.*` frames into their callers.
    JustMyCode,
}

impl Transform {
    /// The transform list from its JSON text (the page keeps it in the URL).
    pub fn parse_list(json: &str) -> Result<Vec<Transform>> {
        if json.trim().is_empty() {
            return Ok(Vec::new());
        }
        serde_json::from_str(json).map_err(|e| QueryError::Unsupported(format!("bad transform list: {e}")))
    }
}

/// The functions a stack's frames refer to, as the transforms see them: by display name, with
/// module and kind; synthetic functions (`[merged]`, `[module]`, `namespace.*`) are added on demand.
/// The viewer's [`crate::explore::StackView`] and the diff's function keys both implement it, so the transforms
/// mean the same in both.
pub trait FuncTable {
    /// Every function of that display name.
    fn named(&self, name: &str) -> &[FuncId];
    fn name(&self, f: FuncId) -> &str;
    fn module(&self, f: FuncId) -> &str;
    fn kind(&self, f: FuncId) -> FrameKind;
    /// The synthetic function of that name, added when new.
    fn synthetic(&mut self, name: &str, module: &str) -> FuncId;
}

/// Applies the transforms to one stack of `t`'s functions (root first; `fixed` leading frames
/// are thread roots and stay). False: the stack is dropped.
pub fn apply_transforms<T: FuncTable>(t: &mut T, ts: &[Transform], st: &mut Vec<FuncId>, fixed: usize) -> bool {
    for tr in ts {
        match tr {
            Transform::FocusFunction { function } => {
                let f = t.named(function);
                match st[fixed..].iter().position(|x| f.contains(x)) {
                    Some(i) => {
                        st.drain(fixed..fixed + i);
                    }
                    None => return false,
                }
            }
            Transform::FocusSubtree { path } => {
                let tail = &st[fixed..];
                if tail.len() < path.len() || path.is_empty() {
                    return false;
                }
                if !path.iter().zip(tail).all(|(n, &f)| t.name(f) == n) {
                    return false;
                }
                st.drain(fixed..fixed + path.len() - 1);
            }
            Transform::Merge { function } => {
                let f = t.named(function);
                if f.is_empty() {
                    continue;
                }
                // The thread roots stay whatever they are called.
                let had = st.len();
                let mut i = 0;
                st.retain(|x| {
                    i += 1;
                    i <= fixed || !f.contains(x)
                });
                if st.len() == fixed && had > fixed {
                    let m = t.synthetic("[merged]", "");
                    st.push(m);
                }
            }
            Transform::Drop { function } => {
                let f = t.named(function);
                if st[fixed..].iter().any(|x| f.contains(x)) {
                    return false;
                }
            }
            Transform::CollapseModule { module } => {
                let m = t.synthetic(&format!("[{module}]"), module);
                *st = collapse(st, fixed, |f| t.module(f) == module, m);
            }
            Transform::CollapseNamespace { namespace } => {
                let prefix = format!("{namespace}.");
                let m = t.synthetic(&format!("{namespace}.*"), "");
                *st = collapse(st, fixed, |f| t.name(f).starts_with(&prefix), m);
            }
            Transform::CollapseRecursion { function } => {
                let f = t.named(function);
                if f.is_empty() {
                    continue;
                }
                let mut out: Vec<FuncId> = Vec::with_capacity(st.len());
                let mut first: Option<usize> = None;
                for (i, &x) in st.iter().enumerate() {
                    if i >= fixed && f.contains(&x) {
                        match first {
                            Some(j) => {
                                out.truncate(j + 1);
                                continue;
                            }
                            None => first = Some(out.len()),
                        }
                    }
                    out.push(x);
                }
                *st = out;
            }
            Transform::JustMyCode => {
                let had = st.len();
                let mut i = 0;
                st.retain(|&x| {
                    i += 1;
                    i <= fixed || !(t.kind(x) != FrameKind::Native && starts_framework(t.name(x)))
                });
                if st.len() == fixed && had > fixed {
                    let m = t.synthetic("[framework]", "");
                    st.push(m);
                }
            }
        }
    }
    true
}

/// Replaces runs of frames for which `inside` holds by one frame `label`.
fn collapse(st: &[FuncId], fixed: usize, inside: impl Fn(FuncId) -> bool, label: FuncId) -> Vec<FuncId> {
    let mut out: Vec<FuncId> = Vec::with_capacity(st.len());
    for (i, &x) in st.iter().enumerate() {
        if i >= fixed && inside(x) {
            if out.len() > fixed && out.last() == Some(&label) {
                continue;
            }
            out.push(label);
        } else {
            out.push(x);
        }
    }
    out
}

fn starts_framework(name: &str) -> bool {
    name.starts_with("System.")
        || name.starts_with("Microsoft.")
        || name.starts_with("Interop+")
        || name.starts_with("Interop.")
}
