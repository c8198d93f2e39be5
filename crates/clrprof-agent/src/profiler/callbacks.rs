//! The `ICorProfilerCallback` methods the agent implements, grouped by what they record. Each is a
//! safe `&self` method called from a `catch_unwind` shim (`clrprof_sys::callback`); an error is
//! logged and the runtime still gets `S_OK` (except from `Initialize`). Most delegate at once to
//! a recorder: `startup`, `functions`, `crate::sampler`, `crate::elt`, `crate::events`.

use clrprof_sys::callback::{CallbackError, CallbackResult, OutBool, ProfilerCallback, RawPtr};
use clrprof_sys::info::utf16_from_raw;
use clrprof_sys::{
    AppDomainID, AssemblyID, ClassID, FunctionID, ModuleID, ObjectID, ThreadID, BOOL, HRESULT, ULONG, WCHAR,
};
use clrprof_trace::*;

use super::Profiler;
use crate::activity::{IN_GC, IN_GC_SUSPENSION};
use crate::events::{alloc, exceptions, gc, providers};
use crate::log_error;
use crate::sampler::slot::{activity_begin, activity_end, activity_exception, activity_gc};
use clrprof_trace::runtime_activity as ra;

impl ProfilerCallback for Profiler {
    // Start-up and shut-down (`startup`).

    fn initialize(&self, info: RawPtr) -> CallbackResult {
        self.start(info, None)
    }

    // The pointer comes from the runtime with its length; it is only read here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn initialize_for_attach(&self, info: RawPtr, data: RawPtr, len: u32) -> CallbackResult {
        let bytes = if data.is_null() || len == 0 {
            &[][..]
        } else {
            // Safety: the runtime passes the client data it received, `len` bytes at `data`.
            unsafe { clrprof_sys::info::slice_from_raw(data as *const u8, len as usize) }
        };
        let r = self.start(info, Some(super::attach::ClientData::parse(bytes)));
        if r.is_err() {
            // The runtime unloads the agent without `ProfilerDetachSucceeded`: a later attach
            // must get a new profiler object.
            super::allow_new_profiler();
        }
        r
    }

    fn profiler_attach_complete(&self) -> CallbackResult {
        // Safety: the profiler object is never freed (`ComObject::create`).
        let me: &'static Profiler = unsafe { &*(self as *const Profiler) };
        me.attach_complete();
        Ok(())
    }

    fn profiler_detach_succeeded(&self) -> CallbackResult {
        self.detached();
        Ok(())
    }

    fn shutdown(&self) -> CallbackResult {
        self.stop()
    }

    fn on_error(&self, callback: &'static str, error: &CallbackError) {
        log_error!("{callback}: {}", error.0);
    }

    fn load_as_notification_only(&self, notification_only: OutBool) -> CallbackResult {
        notification_only.set(false);
        Ok(())
    }

    // Loads: app domains, assemblies, modules and classes.

    fn app_domain_creation_finished(&self, id: AppDomainID, hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if hr < 0 {
            return Ok(());
        }
        let name = s.info.get_app_domain_info(id)?;
        s.emit(AppDomainCreated { ts: s.now(), id: id as u64, name });
        Ok(())
    }

    fn app_domain_shutdown_finished(&self, id: AppDomainID, _hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(AppDomainUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn assembly_load_started(&self, id: AssemblyID) -> CallbackResult {
        activity_begin(ra::pack(ra::ASSEMBLY_LOAD, id as u64));
        let Some(s) = self.state() else { return Ok(()) };
        s.mark_start(id);
        Ok(())
    }

    fn assembly_load_finished(&self, id: AssemblyID, hr: HRESULT) -> CallbackResult {
        activity_end(ra::pack(ra::ASSEMBLY_LOAD, id as u64));
        let Some(s) = self.state() else { return Ok(()) };
        let load_ns = s.since_start(id);
        if hr < 0 {
            return Ok(());
        }
        let (name, appdomain, module) = s.info.get_assembly_info(id)?;
        s.emit(AssemblyLoaded {
            ts: s.now(),
            id: id as u64,
            appdomain: appdomain as u64,
            module: module as u64,
            name,
            load_ns,
        });
        Ok(())
    }

    fn assembly_unload_finished(&self, id: AssemblyID, _hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(AssemblyUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn module_load_started(&self, id: ModuleID) -> CallbackResult {
        activity_begin(ra::pack(ra::MODULE_LOAD, id as u64));
        let Some(s) = self.state() else { return Ok(()) };
        s.mark_start(id);
        Ok(())
    }

    fn module_load_finished(&self, id: ModuleID, hr: HRESULT) -> CallbackResult {
        activity_end(ra::pack(ra::MODULE_LOAD, id as u64));
        let Some(s) = self.state() else { return Ok(()) };
        let load_ns = s.since_start(id);
        if hr < 0 {
            return Ok(());
        }
        let (path, base, assembly) = s.info.get_module_info(id)?;
        s.emit(ModuleLoaded {
            ts: s.now(),
            id: id as u64,
            assembly: assembly as u64,
            path,
            base_address: base as u64,
            load_ns,
        });
        Ok(())
    }

    fn module_attached_to_assembly(&self, module: ModuleID, assembly: AssemblyID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // Repeat the module with its assembly; readers merge records of the same id.
        let (path, base, _) = s.info.get_module_info(module)?;
        s.emit(ModuleLoaded {
            ts: s.now(),
            id: module as u64,
            assembly: assembly as u64,
            path,
            base_address: base as u64,
            load_ns: 0,
        });
        Ok(())
    }

    fn module_unload_started(&self, id: ModuleID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if let Some(sm) = &s.sampler {
            sm.code_unloading(id as u64);
        }
        s.names.forget_module(id);
        if let Some(c) = &s.counts {
            c.forget_module(id);
        }
        s.emit(ModuleUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn class_load_finished(&self, id: ClassID, hr: HRESULT) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if hr < 0 {
            return Ok(());
        }
        s.class_loaded(id);
        Ok(())
    }

    fn class_unload_started(&self, id: ClassID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // Exact allocation counts of the class are named and written before its name is forgotten.
        s.events.alloc.unloading(id, &s.names, &s.writer, s.now());
        s.names.forget_class(id);
        crate::events::eventpipe::forget_class(&s.events.eventpipe(), id as u64);
        s.emit(ClassUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    // Code: JIT compilation, precompiled (ReadyToRun) code found, unloads (`functions`).

    fn function_unload_started(&self, id: FunctionID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(FunctionUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn jit_compilation_started(&self, id: FunctionID, _safe: i32) -> CallbackResult {
        activity_begin(ra::pack(ra::JIT, id as u64));
        let Some(s) = self.state() else { return Ok(()) };
        s.mark_start(id);
        if let Some(c) = &s.counts {
            c.compiling(&s.cx, id);
        }
        Ok(())
    }

    /// `attach --count`: the IL of a rejitted method (crate::rejit).
    fn get_rejit_parameters(
        &self,
        module: ModuleID,
        method: clrprof_sys::mdMethodDef,
        control: RawPtr,
    ) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if let Some(c) = &s.attach_counts {
            // Safety: `control` is this call's ICorProfilerFunctionControl, used only during it.
            if let Some(fc) = unsafe { clrprof_sys::info::FunctionControl::from_raw(control) } {
                c.parameters(module, method, fc);
            }
        }
        Ok(())
    }

    fn rejit_compilation_finished(
        &self,
        id: FunctionID,
        _rejit: clrprof_sys::ReJITID,
        hr: HRESULT,
        _safe: BOOL,
    ) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if let Some(c) = &s.attach_counts {
            // The new code, named and placed as any compiled code (samples in it resolve).
            if hr >= 0 {
                s.function_compiled(id, 0, clrprof_trace::code_kind::JIT);
            }
            c.compiled(&s.cx, id, hr);
        }
        Ok(())
    }

    fn rejit_error(
        &self,
        module: ModuleID,
        method: clrprof_sys::mdMethodDef,
        _id: FunctionID,
        hr: HRESULT,
    ) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if let Some(c) = &s.attach_counts {
            c.error(&s.cx, module, method, hr);
        }
        Ok(())
    }

    /// `record --count`: a callee whose probe is not in its IL yet is not inlined.
    fn jit_inlining(&self, _caller: FunctionID, callee: FunctionID, should_inline: OutBool) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if let Some(c) = &s.counts {
            if !c.may_inline(&s.cx, callee) {
                should_inline.set(false);
            }
        }
        Ok(())
    }

    fn jit_compilation_finished(&self, id: FunctionID, hr: HRESULT, _safe: i32) -> CallbackResult {
        activity_end(ra::pack(ra::JIT, id as u64));
        let Some(s) = self.state() else { return Ok(()) };
        let jit_ns = s.since_start(id);
        if hr >= 0 {
            s.function_compiled(id, jit_ns, code_kind::JIT);
        }
        Ok(())
    }

    /// A method without metadata (`DynamicMethod`, compiled expression, IL stub) is compiled:
    /// reported like JIT-compiled code, named `[dynamic] Name`. The runtime compiles these without
    /// enter/leave hooks, so `--instrument` cannot count calls through them (docs/stress.md).
    fn dynamic_method_jit_compilation_started(
        &self,
        id: FunctionID,
        _safe: i32,
        _il: RawPtr,
        _len: u32,
    ) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.mark_start(id);
        Ok(())
    }

    fn dynamic_method_jit_compilation_finished(&self, id: FunctionID, hr: HRESULT, _safe: i32) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        let jit_ns = s.since_start(id);
        if hr >= 0 {
            s.function_compiled(id, jit_ns, code_kind::DYNAMIC);
        }
        Ok(())
    }

    fn dynamic_method_unloaded(&self, id: FunctionID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        if let Some(sm) = &s.sampler {
            sm.code_unloading(id as u64);
        }
        s.emit(FunctionUnloaded { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn jit_cached_function_search_started(&self, id: FunctionID, use_cached: OutBool) -> CallbackResult {
        activity_begin(ra::pack(ra::READY_TO_RUN, id as u64));
        // `record --count`: in-scope methods are compiled from their probed IL instead.
        let counted = self.state().and_then(|s| s.counts.as_ref().map(|c| !c.use_precompiled(&s.cx, id)));
        use_cached.set(counted != Some(true));
        Ok(())
    }

    fn jit_cached_function_search_finished(&self, id: FunctionID, result: u32) -> CallbackResult {
        activity_end(ra::pack(ra::READY_TO_RUN, id as u64));
        let Some(s) = self.state() else { return Ok(()) };
        // COR_PRF_CACHED_FUNCTION_FOUND = 0
        if result == 0 {
            s.function_compiled(id, 0, code_kind::PRECOMPILED);
        }
        Ok(())
    }

    // Threads: ids, OS threads (the sampler's timers) and names.

    fn thread_created(&self, id: ThreadID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(ThreadCreated { ts: s.now(), id: id as u64 });
        Ok(())
    }

    fn thread_destroyed(&self, id: ThreadID) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(ThreadDestroyed { ts: s.now(), id: id as u64 });
        if let Some(sm) = &s.sampler {
            sm.thread_destroyed(id);
        }
        Ok(())
    }

    fn thread_assigned_to_os_thread(&self, id: ThreadID, os_tid: u32) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        s.emit(ThreadOsId { ts: s.now(), id: id as u64, os_tid });
        if let Some(sm) = &s.sampler {
            sm.thread_assigned(id, os_tid);
        }
        Ok(())
    }

    // The pointer comes from the runtime with its length; it is only read here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn thread_name_changed(&self, id: ThreadID, len: ULONG, name: *const WCHAR) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // Safety: the runtime passes `len` UTF-16 units (not NUL-terminated) valid for the call.
        let name = unsafe { utf16_from_raw(name, len as usize) };
        s.emit(ThreadNamed { ts: s.now(), id: id as u64, name });
        Ok(())
    }

    // Runtime suspension: GC pauses (`crate::events::gc`) and the instrumentation's suspended time.

    fn runtime_suspend_started(&self, reason: u32) -> CallbackResult {
        if gc::is_gc_suspension(reason) {
            activity_gc(IN_GC_SUSPENSION, true);
        }
        if self.state().map(|s| s.instrumentation.is_some()).unwrap_or(false) {
            crate::elt::Instrumentation::suspend_started();
        }
        // Runtime events: GC pauses, and every suspension in the event log.
        self.state().map_or(Ok(()), |s| gc::suspend_started(s, &s.events.gc, reason))
    }

    fn runtime_resume_finished(&self) -> CallbackResult {
        // The thread that suspended the runtime resumes it once its part of the work is done: a
        // blocking GC has finished by then, and a background GC goes on without this thread (the
        // runtime raises that GC's `GarbageCollectionFinished` on the GC's own thread, so the
        // thread that started it would otherwise keep its GC mark).
        activity_gc(IN_GC_SUSPENSION | IN_GC, false);
        if self.state().map(|s| s.instrumentation.is_some()).unwrap_or(false) {
            crate::elt::Instrumentation::resume_finished();
        }
        self.state().map_or(Ok(()), |s| gc::resume_finished(s, &s.events.gc))
    }

    // Exceptions: each a one-line delegation to `crate::events::exceptions`.

    fn exception_thrown(&self, object: ObjectID) -> CallbackResult {
        activity_exception(true);
        self.state().map_or(Ok(()), |s| exceptions::thrown(s, &s.events.exceptions(), object))
    }

    fn exception_search_function_enter(&self, id: FunctionID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::SEARCH_ENTER, id))
    }

    fn exception_search_function_leave(&self) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::SEARCH_LEAVE, 0))
    }

    // Filters and finally blocks are managed code the dispatch runs: not the runtime's own time.
    fn exception_search_filter_enter(&self, id: FunctionID) -> CallbackResult {
        activity_exception(false);
        self.state().map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::FILTER_ENTER, id))
    }

    fn exception_search_filter_leave(&self) -> CallbackResult {
        activity_exception(true);
        self.state().map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::FILTER_LEAVE, 0))
    }

    fn exception_search_catcher_found(&self, id: FunctionID) -> CallbackResult {
        self.state()
            .map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::CATCHER_FOUND, id))
    }

    fn exception_unwind_function_enter(&self, id: FunctionID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::UNWIND_ENTER, id))
    }

    fn exception_unwind_function_leave(&self) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::UNWIND_LEAVE, 0))
    }

    fn exception_unwind_finally_enter(&self, id: FunctionID) -> CallbackResult {
        activity_exception(false);
        self.state()
            .map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::FINALLY_ENTER, id))
    }

    fn exception_unwind_finally_leave(&self) -> CallbackResult {
        activity_exception(true);
        self.state().map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::FINALLY_LEAVE, 0))
    }

    fn exception_catcher_enter(&self, id: FunctionID, object: ObjectID) -> CallbackResult {
        activity_exception(false);
        crate::sampler::slot::activity_unwound();
        self.state().map_or(Ok(()), |s| {
            exceptions::caught_object(&s.events.exceptions(), object);
            exceptions::phase(s, &s.events.exceptions(), exception_phase::CATCHER_ENTER, id)
        })
    }

    fn exception_catcher_leave(&self) -> CallbackResult {
        self.state().map_or(Ok(()), |s| exceptions::phase(s, &s.events.exceptions(), exception_phase::CATCHER_LEAVE, 0))
    }

    // Garbage collections and allocations (`crate::events`).

    // The pointer comes from the runtime with its length; it is only read here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn garbage_collection_started(&self, generations: i32, collected: *const BOOL, reason: u32) -> CallbackResult {
        // Safety: the runtime passes `generations` BOOLs valid for the callback.
        let collected = unsafe { clrprof_sys::info::slice_from_raw(collected, generations.max(0) as usize) };
        activity_gc(IN_GC, true);
        self.state().map_or(Ok(()), |s| gc::started(s, &s.events.gc, collected, reason))
    }

    fn garbage_collection_finished(&self) -> CallbackResult {
        activity_gc(IN_GC, false);
        self.state().map_or(Ok(()), |s| gc::finished(s, &s.events.gc))
    }

    fn object_allocated(&self, object: ObjectID, class: ClassID) -> CallbackResult {
        self.state().map_or(Ok(()), |s| alloc::allocated(s, &s.events.alloc(), object, class))
    }

    // EventPipe events of the in-process session (`crate::events::eventpipe`).

    // The pointers come from the runtime with their lengths; they are only read here.
    #[allow(clippy::not_unsafe_ptr_arg_deref)]
    fn event_pipe_event_delivered(
        &self,
        provider: usize,
        event_id: u32,
        event_version: u32,
        _metadata_len: ULONG,
        _metadata: *const u8,
        data_len: ULONG,
        data: *const u8,
        activity: RawPtr,
        related_activity: RawPtr,
        thread: ThreadID,
        frame_count: ULONG,
        frames: *const usize,
    ) -> CallbackResult {
        let Some(s) = self.state() else { return Ok(()) };
        // Safety: the runtime passes these arrays with their lengths, valid during the callback.
        let (data, ips) = unsafe {
            (
                clrprof_sys::info::slice_from_raw(data, data_len as usize),
                clrprof_sys::info::slice_from_raw(frames, frame_count as usize),
            )
        };
        // Safety: the activity ids are null or GUIDs valid during the callback.
        let (activity, related_activity) = unsafe { (providers::guid(activity), providers::guid(related_activity)) };
        let e = providers::Delivered {
            provider,
            event_id,
            version: event_version,
            data,
            activity,
            related_activity,
            ips,
            thread,
        };
        providers::delivered(s, &s.events, s.sampler.as_deref(), &e)
    }
}
