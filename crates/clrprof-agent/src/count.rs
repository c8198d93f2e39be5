//! `record --count`: exact per-method call counts by IL probes, inlining and ReadyToRun left on.
//!
//! At the first compilation of an in-scope method definition (`JITCompilationStarted`) its body
//! gets a probe before its code ([`crate::il::prepend`]):
//!
//! ```text
//! ldc.i8 <address of the method's counter>   21 <8 bytes>
//! conv.i                                      D3
//! call   Interlocked.Increment(ref long)      28 <token>
//! pop                                         26
//! ```
//!
//! The body is set once (`SetILFunctionBody`) and never again: later tiers and OSR compile from the
//! same IL, and an inlined copy of the method carries the probe too, so inlined calls count. The
//! ReadyToRun code of in-scope methods is refused (`JITCachedFunctionSearchStarted`), the uncounted
//! ones' too (it may have inlined counted ones): they are compiled — and the counted ones probed;
//! every other method keeps its precompiled code.
//!
//! Counters are one `u64` per method definition, each on its own 64-byte line, in an anonymous
//! mapping that never moves. The writer thread reads them racily (aligned 8-byte loads are atomic
//! on x86-64) and writes what changed since its last round (`CountDeltas`), a last time at shutdown.
//! Generic instantiations share their definition's IL, hence its counter: counts are per
//! `(module, MethodDef)`.

use std::collections::HashMap;
use std::sync::Mutex;

use clrprof_sys::{FunctionID, ModuleID, ProfilerInfo};
use clrprof_trace::{count_uncounted as why, CountDeltas, CountInfo, CountMethod};

use crate::context::Context;
use crate::elt::filter::Filter;
use crate::image_metadata::Metadata;
use crate::writer::Writer;

/// Counter slots (64 MiB of address space; only touched pages cost memory).
pub(crate) const CAPACITY: u32 = 1 << 20;
/// Bytes between two counters: one cache line each, no false sharing.
const STRIDE: usize = 64;
/// `Interlocked.Increment(ref long)`: DEFAULT, 1 parameter, returns I8, takes BYREF I8.
pub(crate) const INCREMENT_SIG: [u8; 5] = [0x00, 0x01, 0x0a, 0x10, 0x0a];
/// The probe's evaluation stack depth.
const PROBE_STACK: u16 = 1;

/// Types whose methods the runtime substitutes or expands (research: il-rewriting.md §3): a probe
/// in their IL would vanish, or (Interlocked) call itself. CoreLib's methods marked `[Intrinsic]`
/// are left uncounted too ([`Intrinsics`]).
const INTRINSIC_TYPES: [&str; 6] = [
    "System.Threading.Interlocked",
    "System.Runtime.CompilerServices.Unsafe",
    "System.Runtime.InteropServices.MemoryMarshal",
    "System.Threading.Volatile",
    "System.Runtime.CompilerServices.RuntimeHelpers",
    "System.Activator",
];

/// The methods of a module that are never counted because the runtime may run a call to them
/// without reading their IL: in System.Private.CoreLib, the [`INTRINSIC_TYPES`] and the methods
/// marked `[Intrinsic]` (`IntrinsicAttribute`), whose calls the JIT may expand, so that a probe
/// there would count some calls and not others. One predicate for `record --count` (at each
/// method's first compilation) and `attach --count` (the methods it selects for ReJIT). Read once
/// per module (other modules: nothing to read).
#[derive(Clone, Debug, Default)]
pub(crate) struct Intrinsics {
    corelib: bool,
    /// The constructors of `IntrinsicAttribute` in CoreLib's metadata.
    ctors: std::sync::Arc<[u32]>,
}

impl Intrinsics {
    /// The facts of the module of `assembly`, whose tables are `image` (`None`: not readable;
    /// then only the types are known).
    pub(crate) fn of(assembly: &str, image: Option<&Metadata>) -> Intrinsics {
        let corelib = assembly == "System.Private.CoreLib";
        let ctors = match image {
            Some(i) if corelib => i.constructors("System.Runtime.CompilerServices.IntrinsicAttribute").into(),
            _ => std::sync::Arc::from([]),
        };
        Intrinsics { corelib, ctors }
    }

    /// Whether MethodDef `token` of type `class` (`Ns.Type`; a generic type's name may carry its
    /// parameters: none of the intrinsic types is generic) must stay uncounted.
    pub(crate) fn contains(&self, class: &str, token: u32, image: Option<&Metadata>) -> bool {
        self.corelib
            && (INTRINSIC_TYPES.contains(&class) || image.is_some_and(|i| i.method_has_attribute(token, &self.ctors)))
    }
}

/// The probe for the counter at `addr`, calling `Increment` through `token` (16 bytes).
pub(crate) fn probe(addr: u64, token: u32) -> [u8; 16] {
    let mut p = [0u8; 16];
    p[0] = 0x21;
    p[1..9].copy_from_slice(&addr.to_le_bytes());
    p[9] = 0xd3;
    p[10] = 0x28;
    p[11..15].copy_from_slice(&token.to_le_bytes());
    p[15] = 0x26;
    p
}

/// Whether a module belongs to the framework (out of the default `app` scope): it lives in a
/// shared framework (`…/shared/Microsoft.*/`), or it sits beside System.Private.CoreLib (a
/// self-contained app's directory) and is named as the framework's assemblies are. Dynamic
/// modules (no path) are not the framework.
fn is_framework(path: &str, dir: &str, assembly: &str, corelib_dir: Option<&str>) -> bool {
    if path.contains("/shared/Microsoft.") || assembly == "System.Private.CoreLib" {
        return true;
    }
    let framework_name = assembly.starts_with("System.")
        || assembly.starts_with("Microsoft.")
        || matches!(assembly, "netstandard" | "mscorlib" | "WindowsBase" | "System");
    framework_name && !dir.is_empty() && corelib_dir == Some(dir)
}

/// What was decided for a method definition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// Counted in this slot; its body was set at this point of the rewrite sequence.
    Counted(u32, u64),
    Uncounted(u8),
}

thread_local! {
    /// The rewrite sequence number when the compilation running on this thread started (0: none
    /// seen): an inlinee rewritten after it may have been read by the JIT before its probe was in.
    static JIT_START: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A module as the scope sees it.
#[derive(Clone, Debug)]
struct ModuleFacts {
    assembly: String,
    /// Outside the shared framework (`…/shared/Microsoft.*`).
    app: bool,
    /// The `Interlocked.Increment` token for probes in this module (`None`: could not be made).
    increment: Option<Option<u32>>,
    /// The module's intrinsics ([`Intrinsics`]), read once.
    intrinsics: Option<Intrinsics>,
}

pub(crate) struct Counts {
    counters: *mut u64,
    filter: Filter,
    all: bool,
    state: Mutex<CountState>,
    /// Counter values at the last publication, by slot.
    published: Mutex<Vec<u64>>,
}

#[derive(Default)]
struct CountState {
    methods: HashMap<(ModuleID, u32), Decision>,
    modules: HashMap<ModuleID, ModuleFacts>,
    next_slot: u32,
    /// Bodies set so far (the rewrite sequence; `JIT_START`).
    seq: u64,
    /// The directory of System.Private.CoreLib (the framework's, or a self-contained app's).
    corelib_dir: Option<String>,
    /// Counted methods the JIT asked to inline (logged once each).
    inline_logged: std::collections::HashSet<(ModuleID, u32)>,
}

// Safety: `counters` is a fixed mapping for the process's life, written by probes (atomically,
// `lock xadd`) and read by the writer with aligned loads; everything else is behind mutexes.
unsafe impl Send for Counts {}
// Safety: as above.
unsafe impl Sync for Counts {}

impl Counts {
    /// The counters' mapping and the `CountInfo` record, or `None` when the mapping failed.
    pub(crate) fn new(include: &[String], exclude: &[String], all: bool) -> Option<(Counts, CountInfo)> {
        // Safety: an anonymous private mapping, no file; checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                CAPACITY as usize * STRIDE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED || p.is_null() {
            return None;
        }
        let info = CountInfo {
            capacity: CAPACITY,
            include: include.join(";"),
            exclude: exclude.join(";"),
            scope: if all { "all" } else { "app" }.into(),
        };
        let counts = Counts {
            counters: p.cast(),
            filter: Filter::new(include, exclude),
            all,
            state: Mutex::new(CountState::default()),
            published: Mutex::new(Vec::new()),
        };
        Some((counts, info))
    }

    fn counter_addr(&self, slot: u32) -> u64 {
        self.counters as u64 + slot as u64 * STRIDE as u64
    }

    fn module_facts(&self, st: &mut CountState, info: &ProfilerInfo, module: ModuleID) -> ModuleFacts {
        if let Some(f) = st.modules.get(&module) {
            return f.clone();
        }
        let (path, _, asm) = info.get_module_info(module).unwrap_or_default();
        let assembly = info.get_assembly_info(asm).map(|a| a.0).unwrap_or_default();
        let dir = std::path::Path::new(&path).parent().map(|d| d.to_string_lossy().into_owned()).unwrap_or_default();
        if assembly == "System.Private.CoreLib" {
            st.corelib_dir = Some(dir.clone());
        }
        let app = !is_framework(&path, &dir, &assembly, st.corelib_dir.as_deref());
        let f = ModuleFacts { assembly, app, increment: None, intrinsics: None };
        st.modules.insert(module, f.clone());
        f
    }

    /// Whether a method is in scope, and if not why (`None`: in scope).
    fn scope(&self, s: &Context, st: &mut CountState, id: FunctionID, module: ModuleID, token: u32) -> Option<u8> {
        let facts = self.module_facts(st, &s.info, module);
        if !self.all && !facts.app && self.filter.takes_all() {
            return Some(why::OUT_OF_SCOPE);
        }
        let corelib = facts.assembly == "System.Private.CoreLib";
        if self.filter.takes_all() && !corelib {
            return None;
        }
        let names = s.function_names(id);
        // With patterns the patterns alone decide the scope (framework included when they match).
        if !self.filter.takes_all() && !self.filter.matches(&names.name, &names.class_name, &facts.assembly) {
            return Some(why::OUT_OF_SCOPE);
        }
        if !corelib {
            return None;
        }
        let md = s.names.module_metadata(module);
        let image = md.as_ref().and_then(|m| m.image());
        let intrinsics = match facts.intrinsics {
            Some(i) => i,
            None => {
                let i = Intrinsics::of(&facts.assembly, image);
                if let Some(f) = st.modules.get_mut(&module) {
                    f.intrinsics = Some(i.clone());
                }
                i
            }
        };
        intrinsics.contains(&names.class_name, token, image).then_some(why::INTRINSIC)
    }

    /// `JITCachedFunctionSearchStarted`: true (use its ReadyToRun code) for an out-of-scope method,
    /// false (compile it) for every in-scope one, counted or not. An in-scope method that cannot be
    /// counted (an intrinsic) is decided and reported here, as it may never be compiled; its
    /// precompiled code is refused all the same, for it may have inlined counted methods of its
    /// version bubble without their probe (`RuntimeType.get_TypeHandle`'s ReadyToRun code carries
    /// `RuntimeTypeHandle..ctor`): compiled by the JIT, it inlines only probed bodies
    /// ([`Counts::may_inline`]).
    pub(crate) fn use_precompiled(&self, s: &Context, id: FunctionID) -> bool {
        let Ok((_, module, token)) = s.info.get_function_info(id) else { return true };
        let Ok(mut st) = self.state.lock() else { return true };
        match st.methods.get(&(module, token)) {
            Some(Decision::Counted(..)) => false,
            Some(&Decision::Uncounted(reason)) => reason == why::OUT_OF_SCOPE,
            None => match self.scope(s, &mut st, id, module, token) {
                None => false,
                Some(why::OUT_OF_SCOPE) => true,
                Some(reason) => {
                    st.methods.insert((module, token), Decision::Uncounted(reason));
                    drop(st);
                    self.report(s, id, module, token, Decision::Uncounted(reason));
                    false
                }
            },
        }
    }

    /// `JITInlining`: a counted callee is inlined only when its probe was in its IL before the
    /// compilation on this thread started (the JIT reads an inlinee's IL before it asks, so a body
    /// set in between may have been read without its probe); an in-scope callee not counted yet is
    /// not inlined; everything else is left to the JIT.
    pub(crate) fn may_inline(&self, s: &Context, callee: FunctionID) -> bool {
        let Ok((_, module, token)) = s.info.get_function_info(callee) else { return true };
        let Ok(mut st) = self.state.lock() else { return true };
        match st.methods.get(&(module, token)) {
            Some(&Decision::Counted(_, seq)) => {
                let started = JIT_START.with(|c| c.get());
                if started == 0 || seq > started {
                    return false;
                }
                // Said once per method: the JIT offered to inline a probed body (tests look for it).
                if st.inline_logged.insert((module, token)) {
                    drop(st);
                    crate::log_info!("count: the JIT may inline counted method {}", s.function_names(callee).name);
                }
                true
            }
            Some(Decision::Uncounted(_)) => true,
            None => self.scope(s, &mut st, callee, module, token).is_some(),
        }
    }

    /// `JITCompilationStarted`: the first compilation of an in-scope method definition gets its probe.
    pub(crate) fn compiling(&self, s: &Context, id: FunctionID) {
        self.decide(s, id);
        JIT_START.with(|c| c.set(self.state.lock().map(|st| st.seq).unwrap_or(0)));
    }

    fn decide(&self, s: &Context, id: FunctionID) {
        let Ok((_, module, token)) = s.info.get_function_info(id) else { return };
        let Ok(mut st) = self.state.lock() else { return };
        if st.methods.contains_key(&(module, token)) {
            return;
        }
        let decision = match self.scope(s, &mut st, id, module, token) {
            Some(reason) => Decision::Uncounted(reason),
            None => self.rewrite(s, &mut st, module, token),
        };
        st.methods.insert((module, token), decision);
        drop(st);
        self.report(s, id, module, token, decision);
    }

    fn report(&self, s: &Context, id: FunctionID, module: ModuleID, token: u32, decision: Decision) {
        let (slot, reason) = match decision {
            Decision::Counted(slot, _) => (slot, why::COUNTED),
            Decision::Uncounted(r) => (u32::MAX, r),
        };
        // Out-of-scope methods are many (the whole framework): said only when patterns chose them.
        if reason != why::OUT_OF_SCOPE || !self.filter.takes_all() {
            // A generic definition is named as declared (its instantiations share the counter).
            let compiled = s.function_names(id);
            let name = match s.names.method_def_name(module, token) {
                Some(n) if n != compiled.name => n,
                _ => String::new(),
            };
            s.emit(CountMethod { function: id as u64, module: module as u64, token, slot, reason, name });
        }
    }

    fn rewrite(&self, s: &Context, st: &mut CountState, module: ModuleID, token: u32) -> Decision {
        let Some(increment) = self.increment_token(s, st, module) else {
            return Decision::Uncounted(why::NO_PROBE_TOKEN);
        };
        let body = match s.info.get_il_function_body(module, token) {
            Ok(Some(b)) => b,
            _ => return Decision::Uncounted(why::REFUSED),
        };
        if st.next_slot >= CAPACITY {
            return Decision::Uncounted(why::CAPACITY);
        }
        let slot = st.next_slot;
        let new = match crate::il::prepend(body, &probe(self.counter_addr(slot), increment), PROBE_STACK) {
            Ok(b) => b,
            Err(e) => {
                crate::log_info!("count: method 0x{token:08x} of module 0x{module:x} left alone: {e}");
                return Decision::Uncounted(why::UNPARSEABLE);
            }
        };
        match s.info.set_il_function_body(module, token, &new) {
            Ok(()) => {
                st.next_slot += 1;
                st.seq += 1;
                Decision::Counted(slot, st.seq)
            }
            Err(e) => {
                crate::log_warn!("count: method 0x{token:08x} of module 0x{module:x}: {e}");
                Decision::Uncounted(why::REFUSED)
            }
        }
    }

    /// The token probes of `module` call: CoreLib's own `Interlocked.Increment(ref long)`
    /// MethodDef, else a MemberRef on a TypeRef to `System.Threading.Interlocked` in
    /// System.Private.CoreLib (the module's AssemblyRef to it, or a new one). Made once per module.
    fn increment_token(&self, s: &Context, st: &mut CountState, module: ModuleID) -> Option<u32> {
        let facts = self.module_facts(st, &s.info, module);
        if let Some(t) = facts.increment {
            return t;
        }
        let t = self.make_increment_token(s, module, &facts.assembly);
        match &t {
            Some(tok) => crate::log_info!("count: module {} calls Increment through 0x{tok:08x}", facts.assembly),
            None => crate::log_warn!("count: no Interlocked.Increment reference in module {}", facts.assembly),
        }
        if let Some(f) = st.modules.get_mut(&module) {
            f.increment = Some(t);
        }
        t
    }

    fn make_increment_token(&self, s: &Context, module: ModuleID, assembly: &str) -> Option<u32> {
        let md = s.names.module_metadata(module)?;
        let image = md.image()?;
        if assembly == "System.Private.CoreLib" {
            let t = image.find_type_def("System.Threading.Interlocked")?;
            return image.find_method(t, "Increment", &INCREMENT_SIG);
        }
        let emit = s.info.get_module_metadata_emit(module).ok()??;
        // System.Runtime does not forward Interlocked (System.Threading does): the reference
        // names CoreLib itself, which every assembly's binder resolves to the loaded one.
        let scope = match image.assembly_refs().into_iter().find(|(_, n)| n == "System.Private.CoreLib") {
            Some((t, _)) => t,
            None => emit
                .define_assembly_ref(
                    "System.Private.CoreLib",
                    [0; 4],
                    &[0x7c, 0xec, 0x85, 0xd7, 0xbe, 0xa7, 0x79, 0x8e],
                )
                .ok()?,
        };
        let type_ref = emit.define_type_ref_by_name(scope, "System.Threading.Interlocked").ok()?;
        emit.define_member_ref(type_ref, "Increment", &INCREMENT_SIG).ok()
    }

    /// A module unloads (collectible): its id may come back for another module, whose methods
    /// must be decided afresh. The slots its methods had keep the counts they got.
    pub(crate) fn forget_module(&self, module: ModuleID) {
        if let Ok(mut st) = self.state.lock() {
            st.methods.retain(|k, _| k.0 != module);
            st.inline_logged.retain(|k| k.0 != module);
            st.modules.remove(&module);
        }
    }

    /// `attach --count` ([`crate::rejit`]): a counter for `(module, token)` and the probe that
    /// increments it, the method recorded as counted; `Err(reason)` when none can be had.
    pub(crate) fn attach_probe(&self, s: &Context, module: ModuleID, token: u32) -> Result<(u32, [u8; 16]), u8> {
        let Ok(mut st) = self.state.lock() else { return Err(why::REFUSED) };
        let increment = self.increment_token(s, &mut st, module).ok_or(why::NO_PROBE_TOKEN)?;
        if st.next_slot >= CAPACITY {
            return Err(why::CAPACITY);
        }
        let slot = st.next_slot;
        st.next_slot += 1;
        st.methods.insert((module, token), Decision::Counted(slot, 0));
        Ok((slot, probe(self.counter_addr(slot), increment)))
    }

    /// Writes the calls counted since the last round (writer thread).
    pub(crate) fn publish(&self, w: &Writer, now_ns: u64) {
        let used = self.state.lock().map(|s| s.next_slot).unwrap_or(0) as usize;
        let Ok(mut last) = self.published.lock() else { return };
        last.resize(used, 0);
        let (mut slots, mut counts) = (Vec::new(), Vec::new());
        for (i, prev) in last.iter_mut().enumerate() {
            // Safety: slot `i` < `used` ≤ CAPACITY lies in the mapping; an aligned 8-byte load is
            // atomic on x86-64 and the probes only ever add to it.
            let now = unsafe { std::ptr::read_volatile(self.counters.add(i * STRIDE / 8)) };
            if now > *prev {
                slots.push(i as u32);
                counts.push(now - *prev);
                *prev = now;
            }
        }
        if !slots.is_empty() {
            w.emit(&CountDeltas { ts: now_ns, slots, counts }.into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_framework_is_the_shared_one_or_beside_corelib_by_name() {
        let shared = "/usr/share/dotnet/shared/Microsoft.NETCore.App/10.0.1";
        assert!(is_framework(&format!("{shared}/System.Linq.dll"), shared, "System.Linq", Some(shared)));
        assert!(is_framework(
            "/x/shared/Microsoft.AspNetCore.App/10.0.1/Microsoft.AspNetCore.dll",
            "",
            "Microsoft.AspNetCore",
            None
        ));
        assert!(!is_framework("/app/Calls.dll", "/app", "Calls", Some(shared)));
        // Self-contained: the app beside CoreLib stays the app; the framework's names do not.
        assert!(!is_framework("/app/Calls.dll", "/app", "Calls", Some("/app")));
        assert!(is_framework("/app/System.Linq.dll", "/app", "System.Linq", Some("/app")));
        assert!(!is_framework("/app/lib/System.Extra.dll", "/app/lib", "System.Extra", Some("/app")));
        assert!(!is_framework("", "", "Dynamic", Some("/app")));
    }

    /// The one predicate of `record --count` and `attach --count`, on the installed CoreLib.
    #[test]
    fn corelib_s_intrinsics_are_the_listed_types_and_the_methods_marked_intrinsic() {
        use crate::image_metadata::tests::{corelib, file_metadata};
        let bytes = corelib().expect("System.Private.CoreLib.dll of the installed runtime");
        let md = Metadata::parse(file_metadata(&bytes).expect("a CLI image")).expect("its tables");
        let corelib = Intrinsics::of("System.Private.CoreLib", Some(&md));
        let method = |ty: &str, name: &str, sig: &[u8]| {
            let t = md.find_type_def(ty).unwrap_or_else(|| panic!("{ty}"));
            md.find_method(t, name, sig).unwrap_or_else(|| panic!("{ty}.{name}"))
        };
        // [Intrinsic]: String.get_Length; not: String.Concat(string, string).
        let get_length = method("System.String", "get_Length", &[0x20, 0x00, 0x08]);
        let concat = method("System.String", "Concat", &[0x00, 0x02, 0x0e, 0x0e, 0x0e]);
        assert!(corelib.contains("System.String", get_length, Some(&md)));
        assert!(!corelib.contains("System.String", concat, Some(&md)));
        // A listed type: every method, marked or not, and without the image too.
        let increment = method("System.Threading.Interlocked", "Increment", &INCREMENT_SIG);
        assert!(corelib.contains("System.Threading.Interlocked", increment, Some(&md)));
        assert!(Intrinsics::of("System.Private.CoreLib", None).contains(
            "System.Threading.Interlocked",
            increment,
            None
        ));
        assert!(!Intrinsics::of("System.Private.CoreLib", None).contains("System.String", get_length, None));
        // Outside CoreLib nothing is intrinsic, whatever the names or tokens.
        let app = Intrinsics::of("AttachCount", Some(&md));
        assert!(!app.contains("System.String", get_length, Some(&md)));
        assert!(!app.contains("System.Threading.Interlocked", increment, Some(&md)));
        // Many more are marked (vector, span and math helpers among them).
        let marked = (1..=md.method_count()).filter(|r| corelib.contains("", 0x0600_0000 | r, Some(&md))).count();
        assert!(marked > 100, "{marked} methods marked [Intrinsic]");
    }

    #[test]
    fn the_probe_is_ldc_i8_conv_i_call_pop() {
        let p = probe(0x1122_3344_5566_7788, 0x0a00_0012);
        assert_eq!(p, [0x21, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xd3, 0x28, 0x12, 0x00, 0x00, 0x0a, 0x26]);
    }
}
