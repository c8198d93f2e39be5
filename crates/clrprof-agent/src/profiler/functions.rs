//! Functions and classes for the loads/JIT recorder (the General Code Profiler's tables): each
//! compiled function's names, code range and IL size, and each loaded class's name. The runtime's
//! callbacks only queue ids; names are looked up later on the writer thread (at once for
//! collectible modules, whose ids die at unload).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use clrprof_sys::info::ProfilerInfo;
use clrprof_sys::{ClassID, FunctionID, ModuleID};
use clrprof_trace::{ClassLoaded, FunctionCompiled};

use crate::context::Context;
use crate::os::os_tid;
use crate::sampler::Sampler;
use crate::writer::Writer;

/// A runtime notification whose names are looked up later (see `Functions::resolve_deferred`).
enum Deferred {
    Function { id: FunctionID, ts: u64, os_tid: u32, jit_ns: u64, kind: u8 },
    Class { id: ClassID, ts: u64 },
}

/// Functions whose native code was not yet published when they were reported (precompiled code
/// found by `JITCachedFunctionSearchFinished`); the writer thread looks their code up before each
/// flush and emits them.
#[derive(Default)]
pub(crate) struct PendingCode {
    items: Mutex<Vec<(FunctionCompiled, u32)>>,
}

/// Flushes (about 1 s at the default interval) after which a function is reported without code.
const PENDING_CODE_TRIES: u32 = 20;

impl PendingCode {
    pub(super) fn resolve(&self, info: &ProfilerInfo, writer: &Writer, give_up: bool) {
        let Ok(mut items) = self.items.lock() else { return };
        items.retain_mut(|(rec, tries)| {
            *tries += 1;
            match info.get_code_info2(rec.id as usize) {
                Ok(code) if !code.is_empty() => {
                    rec.code_start = code[0].start_address as u64;
                    rec.code_size = code.iter().map(|c| c.size as u64).sum();
                    writer.emit(&rec.clone().into());
                    false
                }
                _ if give_up || *tries >= PENDING_CODE_TRIES => {
                    writer.emit(&rec.clone().into());
                    false
                }
                _ => true,
            }
        });
    }
}

/// The loads/JIT recorder's queues: what the runtime reported and is named later.
#[derive(Default)]
pub(crate) struct Functions {
    /// Precompiled code not published yet when reported (see [`PendingCode`]).
    pub(crate) pending_code: Arc<PendingCode>,
    /// Functions and classes reported by the runtime whose names are resolved off the app's
    /// threads, by the writer thread before each flush. Only non-collectible modules' ids are
    /// queued: those never die.
    deferred: Mutex<Vec<Deferred>>,
    /// Whether a module is collectible (its ids die at unload), by module.
    collectible: Mutex<HashMap<ModuleID, bool>>,
}

impl Functions {
    /// True when `module` can unload (a collectible assembly context): ids of its functions and
    /// classes die then, so they are never looked up later from another thread.
    pub(crate) fn is_collectible(&self, cx: &Context, module: ModuleID) -> bool {
        if module == 0 {
            return false;
        }
        if let Some(c) = self.collectible.lock().ok().and_then(|m| m.get(&module).copied()) {
            return c;
        }
        // COR_PRF_MODULE_COLLECTIBLE; if the runtime cannot say, be safe.
        let c = cx
            .info
            .get_module_flags(module)
            .map(|f| f & clrprof_sys::consts::module_flags::COLLECTIBLE != 0)
            .unwrap_or(true);
        if let Ok(mut m) = self.collectible.lock() {
            m.insert(module, c);
        }
        c
    }

    /// What frees the code of `id`: `None` when nothing does; the DynamicMethod's own id (the
    /// runtime collects it when it is no longer referenced) or its collectible module's id; 0 when
    /// its module cannot be told (treated as collectible, to be safe).
    fn unloads_with(&self, cx: &Context, id: FunctionID) -> Option<u64> {
        if cx.info.is_function_dynamic(id).unwrap_or(false) {
            return Some(id as u64);
        }
        match cx.info.get_function_info(id) {
            Ok((_, module, _)) => self.is_collectible(cx, module).then_some(module as u64),
            Err(_) => Some(0),
        }
    }

    /// Reports a compiled function. Its names, code range and IL size are looked up later on the
    /// writer thread — at once when its module is collectible, while its id is sure to be valid.
    /// The sampler learns of the new code too (one collectible check serves both).
    pub(super) fn function_compiled(
        &self,
        cx: &Context,
        sampler: Option<&Sampler>,
        id: FunctionID,
        jit_ns: u64,
        kind: u8,
    ) {
        let (ts, tid) = (cx.now(), os_tid());
        let unloads_with = self.unloads_with(cx, id);
        let collectible = unloads_with.is_some();
        if let Some(sm) = sampler {
            // Code found at attach may include OSR versions, like fresh JIT code.
            let jitted = matches!(kind, clrprof_trace::code_kind::JIT | clrprof_trace::code_kind::EXISTING);
            sm.code_compiled(id, unloads_with, jitted);
        }
        if collectible {
            self.emit_function(cx, &cx.writer, id, ts, tid, jit_ns, kind, false);
            return;
        }
        let d = Deferred::Function { id, ts, os_tid: tid, jit_ns, kind };
        if let Ok(mut q) = self.deferred.lock() {
            q.push(d);
        }
    }

    /// Resolves and emits everything queued so far (writer thread, or an unloading callback).
    pub(crate) fn resolve_deferred(&self, cx: &Context, w: &Writer) {
        let items = match self.deferred.lock() {
            Ok(mut q) => std::mem::take(&mut *q),
            Err(_) => return,
        };
        for d in items {
            match d {
                Deferred::Function { id, ts, os_tid, jit_ns, kind } => {
                    self.emit_function(cx, w, id, ts, os_tid, jit_ns, kind, !w.is_stopping())
                }
                Deferred::Class { id, ts } => self.emit_class(cx, w, id, ts),
            }
        }
    }

    fn emit_class(&self, cx: &Context, w: &Writer, id: ClassID, ts: u64) {
        let (module, token) = match cx.info.get_class_id_info2(id) {
            Ok((m, t, _, _)) => (m as u64, t),
            Err(_) => (0, 0),
        };
        let name = cx.names.class_name(id).to_string();
        w.emit(&ClassLoaded { ts, id: id as u64, module, token, name }.into());
    }

    /// `retry`: when the code is not published yet, look it up again on later flushes (never for
    /// collectible code, whose id may die).
    #[allow(clippy::too_many_arguments)]
    fn emit_function(
        &self,
        cx: &Context,
        w: &Writer,
        id: FunctionID,
        ts: u64,
        os_tid: u32,
        jit_ns: u64,
        kind: u8,
        retry: bool,
    ) {
        let f = cx.function_names(id);
        let code = cx.info.get_code_info2(id).unwrap_or_default();
        let code_start = code.first().map(|c| c.start_address as u64).unwrap_or(0);
        let code_size = code.iter().map(|c| c.size as u64).sum();
        let rec = FunctionCompiled {
            ts,
            id: id as u64,
            os_tid,
            class: f.class as u64,
            module: f.module as u64,
            token: f.token,
            name: f.name.clone(),
            class_name: f.class_name.clone(),
            signature: f.signature.clone(),
            code_start,
            code_size,
            jit_ns,
            kind,
            il_size: cx.info.il_code_size(f.module, f.token).ok().flatten().unwrap_or(0),
        };
        // Precompiled code may not be published yet: retry on later flushes.
        if code.is_empty() && retry {
            if let Ok(mut p) = self.pending_code.items.lock() {
                p.push((rec, 0));
            }
        } else {
            w.emit(&rec.into());
        }
    }

    /// Reports a loaded class; its name is looked up later on the writer thread — at once when its
    /// module is collectible.
    pub(super) fn class_loaded(&self, cx: &Context, id: ClassID) {
        let ts = cx.now();
        let module = cx.info.get_class_id_info2(id).map(|(m, _, _, _)| m).unwrap_or(0);
        if module == 0 || self.is_collectible(cx, module) {
            self.emit_class(cx, &cx.writer, id, ts);
        } else if let Ok(mut q) = self.deferred.lock() {
            q.push(Deferred::Class { id, ts });
        }
    }
}
