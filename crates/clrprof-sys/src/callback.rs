//! The profiler COM object: one `ICorProfilerCallback11` vtable whose every slot is a shim that
//! catches panics and forwards to a safe `&self` method of [`ProfilerCallback`].
//!
//! The runtime QIs for Callback2, then 11 down to 3; one object answers IUnknown and every
//! Callback version with the same pointer (each version's vtable is a prefix of the next).

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU32, Ordering};

use crate::consts::*;
use crate::types::*;

/// Error a callback reports; it is logged by [`ProfilerCallback::on_error`] and the runtime gets
/// `S_OK` (except from `Initialize`, whose failure unloads the profiler).
#[derive(Debug)]
pub struct CallbackError(pub String);

impl<E: std::fmt::Display> From<E> for CallbackError {
    fn from(e: E) -> Self {
        CallbackError(e.to_string())
    }
}

pub type CallbackResult = Result<(), CallbackError>;

/// A `BOOL*` out-parameter; writes are ignored when the runtime passed NULL.
#[repr(transparent)]
pub struct OutBool(*mut BOOL);

impl OutBool {
    pub fn set(&self, value: bool) {
        if !self.0.is_null() {
            // Safety: the runtime passes a valid, writable BOOL for the duration of the callback.
            unsafe { *self.0 = value as BOOL };
        }
    }
}

/// An opaque pointer the callback only passes through (`IUnknown*`, `void*`, `GUID*`, arrays).
pub type RawPtr = *const c_void;

macro_rules! callbacks {
    ( $( $slot:literal $name:ident => $method:ident ( $( $arg:ident : $ty:ty ),* ); )* ) => {
        /// The `ICorProfilerCallback11` vtable: IUnknown, then 95 callbacks in IDL order.
        #[repr(C)]
        pub struct CallbackVtbl {
            pub query_interface: unsafe extern "system" fn(*mut c_void, *const GUID, *mut *mut c_void) -> HRESULT,
            pub add_ref: unsafe extern "system" fn(*mut c_void) -> ULONG,
            pub release: unsafe extern "system" fn(*mut c_void) -> ULONG,
            $( pub $method: unsafe extern "system" fn(*mut c_void $(, $ty)*) -> HRESULT, )*
        }

        /// Slot index of each callback, for tests of the layout.
        pub const CALLBACK_SLOTS: &[(&str, usize)] = &[ $( (stringify!($name), $slot), )* ];

        /// The safe side of every callback. All methods default to "do nothing, succeed".
        /// Callbacks arrive concurrently from many threads: implementations keep `Sync` state.
        #[allow(unused_variables, clippy::too_many_arguments)]
        pub trait ProfilerCallback: Send + Sync + 'static {
            $(
                #[doc = concat!("`ICorProfilerCallback::", stringify!($name), "` (vtable slot ", stringify!($slot), ").")]
                fn $method(&self $(, $arg: $ty)*) -> CallbackResult { Ok(()) }
            )*

            /// A callback returned an error or panicked; `callback` is its IDL name.
            fn on_error(&self, callback: &'static str, error: &CallbackError) {}
        }

        impl<T: ProfilerCallback> ComObject<T> {
            const VTBL: CallbackVtbl = CallbackVtbl {
                query_interface: Self::query_interface,
                add_ref: Self::add_ref,
                release: Self::release,
                $( $method: Self::$method, )*
            };

            $(
                #[allow(non_snake_case, clippy::too_many_arguments)]
                unsafe extern "system" fn $method(this: *mut c_void $(, $arg: $ty)*) -> HRESULT {
                    // Safety: `this` is the pointer we handed out from `CreateInstance`; the object is
                    // never freed while the runtime holds it (refcounted, and leaked at zero).
                    let obj = unsafe { &*(this as *const ComObject<T>) };
                    obj.dispatch(stringify!($name), |inner| inner.$method($($arg),*))
                }
            )*
        }
    };
}

callbacks! {
    3 Initialize => initialize(info: RawPtr);
    4 Shutdown => shutdown();
    5 AppDomainCreationStarted => app_domain_creation_started(id: AppDomainID);
    6 AppDomainCreationFinished => app_domain_creation_finished(id: AppDomainID, hr: HRESULT);
    7 AppDomainShutdownStarted => app_domain_shutdown_started(id: AppDomainID);
    8 AppDomainShutdownFinished => app_domain_shutdown_finished(id: AppDomainID, hr: HRESULT);
    9 AssemblyLoadStarted => assembly_load_started(id: AssemblyID);
    10 AssemblyLoadFinished => assembly_load_finished(id: AssemblyID, hr: HRESULT);
    11 AssemblyUnloadStarted => assembly_unload_started(id: AssemblyID);
    12 AssemblyUnloadFinished => assembly_unload_finished(id: AssemblyID, hr: HRESULT);
    13 ModuleLoadStarted => module_load_started(id: ModuleID);
    14 ModuleLoadFinished => module_load_finished(id: ModuleID, hr: HRESULT);
    15 ModuleUnloadStarted => module_unload_started(id: ModuleID);
    16 ModuleUnloadFinished => module_unload_finished(id: ModuleID, hr: HRESULT);
    17 ModuleAttachedToAssembly => module_attached_to_assembly(module: ModuleID, assembly: AssemblyID);
    18 ClassLoadStarted => class_load_started(id: ClassID);
    19 ClassLoadFinished => class_load_finished(id: ClassID, hr: HRESULT);
    20 ClassUnloadStarted => class_unload_started(id: ClassID);
    21 ClassUnloadFinished => class_unload_finished(id: ClassID, hr: HRESULT);
    22 FunctionUnloadStarted => function_unload_started(id: FunctionID);
    23 JITCompilationStarted => jit_compilation_started(id: FunctionID, safe_to_block: BOOL);
    24 JITCompilationFinished => jit_compilation_finished(id: FunctionID, hr: HRESULT, safe_to_block: BOOL);
    25 JITCachedFunctionSearchStarted => jit_cached_function_search_started(id: FunctionID, use_cached: OutBool);
    26 JITCachedFunctionSearchFinished => jit_cached_function_search_finished(id: FunctionID, result: u32);
    27 JITFunctionPitched => jit_function_pitched(id: FunctionID);
    28 JITInlining => jit_inlining(caller: FunctionID, callee: FunctionID, should_inline: OutBool);
    29 ThreadCreated => thread_created(id: ThreadID);
    30 ThreadDestroyed => thread_destroyed(id: ThreadID);
    31 ThreadAssignedToOSThread => thread_assigned_to_os_thread(id: ThreadID, os_tid: u32);
    32 RemotingClientInvocationStarted => remoting_client_invocation_started();
    33 RemotingClientSendingMessage => remoting_client_sending_message(cookie: RawPtr, is_async: BOOL);
    34 RemotingClientReceivingReply => remoting_client_receiving_reply(cookie: RawPtr, is_async: BOOL);
    35 RemotingClientInvocationFinished => remoting_client_invocation_finished();
    36 RemotingServerReceivingMessage => remoting_server_receiving_message(cookie: RawPtr, is_async: BOOL);
    37 RemotingServerInvocationStarted => remoting_server_invocation_started();
    38 RemotingServerInvocationReturned => remoting_server_invocation_returned();
    39 RemotingServerSendingReply => remoting_server_sending_reply(cookie: RawPtr, is_async: BOOL);
    40 UnmanagedToManagedTransition => unmanaged_to_managed_transition(id: FunctionID, reason: u32);
    41 ManagedToUnmanagedTransition => managed_to_unmanaged_transition(id: FunctionID, reason: u32);
    42 RuntimeSuspendStarted => runtime_suspend_started(reason: u32);
    43 RuntimeSuspendFinished => runtime_suspend_finished();
    44 RuntimeSuspendAborted => runtime_suspend_aborted();
    45 RuntimeResumeStarted => runtime_resume_started();
    46 RuntimeResumeFinished => runtime_resume_finished();
    47 RuntimeThreadSuspended => runtime_thread_suspended(id: ThreadID);
    48 RuntimeThreadResumed => runtime_thread_resumed(id: ThreadID);
    49 MovedReferences => moved_references(count: ULONG, old_starts: RawPtr, new_starts: RawPtr, lengths: RawPtr);
    50 ObjectAllocated => object_allocated(object: ObjectID, class: ClassID);
    51 ObjectsAllocatedByClass => objects_allocated_by_class(count: ULONG, classes: RawPtr, objects: RawPtr);
    52 ObjectReferences => object_references(object: ObjectID, class: ClassID, count: ULONG, refs: RawPtr);
    53 RootReferences => root_references(count: ULONG, refs: RawPtr);
    54 ExceptionThrown => exception_thrown(object: ObjectID);
    55 ExceptionSearchFunctionEnter => exception_search_function_enter(id: FunctionID);
    56 ExceptionSearchFunctionLeave => exception_search_function_leave();
    57 ExceptionSearchFilterEnter => exception_search_filter_enter(id: FunctionID);
    58 ExceptionSearchFilterLeave => exception_search_filter_leave();
    59 ExceptionSearchCatcherFound => exception_search_catcher_found(id: FunctionID);
    60 ExceptionOSHandlerEnter => exception_os_handler_enter(reserved: usize);
    61 ExceptionOSHandlerLeave => exception_os_handler_leave(reserved: usize);
    62 ExceptionUnwindFunctionEnter => exception_unwind_function_enter(id: FunctionID);
    63 ExceptionUnwindFunctionLeave => exception_unwind_function_leave();
    64 ExceptionUnwindFinallyEnter => exception_unwind_finally_enter(id: FunctionID);
    65 ExceptionUnwindFinallyLeave => exception_unwind_finally_leave();
    66 ExceptionCatcherEnter => exception_catcher_enter(id: FunctionID, object: ObjectID);
    67 ExceptionCatcherLeave => exception_catcher_leave();
    68 COMClassicVTableCreated => com_classic_vtable_created(class: ClassID, iid: RawPtr, vtable: RawPtr, slots: ULONG);
    69 COMClassicVTableDestroyed => com_classic_vtable_destroyed(class: ClassID, iid: RawPtr, vtable: RawPtr);
    70 ExceptionCLRCatcherFound => exception_clr_catcher_found();
    71 ExceptionCLRCatcherExecute => exception_clr_catcher_execute();
    72 ThreadNameChanged => thread_name_changed(id: ThreadID, len: ULONG, name: *const WCHAR);
    73 GarbageCollectionStarted => garbage_collection_started(generations: i32, collected: *const BOOL, reason: u32);
    74 SurvivingReferences => surviving_references(count: ULONG, starts: RawPtr, lengths: RawPtr);
    75 GarbageCollectionFinished => garbage_collection_finished();
    76 FinalizeableObjectQueued => finalizeable_object_queued(flags: u32, object: ObjectID);
    77 RootReferences2 => root_references2(count: ULONG, refs: RawPtr, kinds: RawPtr, flags: RawPtr, ids: RawPtr);
    78 HandleCreated => handle_created(handle: GCHandleID, object: ObjectID);
    79 HandleDestroyed => handle_destroyed(handle: GCHandleID);
    80 InitializeForAttach => initialize_for_attach(info: RawPtr, client_data: RawPtr, client_data_len: u32);
    81 ProfilerAttachComplete => profiler_attach_complete();
    82 ProfilerDetachSucceeded => profiler_detach_succeeded();
    83 ReJITCompilationStarted => rejit_compilation_started(id: FunctionID, rejit: ReJITID, safe_to_block: BOOL);
    84 GetReJITParameters => get_rejit_parameters(module: ModuleID, method: mdMethodDef, control: RawPtr);
    85 ReJITCompilationFinished => rejit_compilation_finished(id: FunctionID, rejit: ReJITID, hr: HRESULT, safe_to_block: BOOL);
    86 ReJITError => rejit_error(module: ModuleID, method: mdMethodDef, id: FunctionID, hr: HRESULT);
    87 MovedReferences2 => moved_references2(count: ULONG, old_starts: RawPtr, new_starts: RawPtr, lengths: RawPtr);
    88 SurvivingReferences2 => surviving_references2(count: ULONG, starts: RawPtr, lengths: RawPtr);
    89 ConditionalWeakTableElementReferences => conditional_weak_table_element_references(count: ULONG, keys: RawPtr, values: RawPtr, roots: RawPtr);
    90 GetAssemblyReferences => get_assembly_references(path: *const WCHAR, provider: RawPtr);
    91 ModuleInMemorySymbolsUpdated => module_in_memory_symbols_updated(id: ModuleID);
    92 DynamicMethodJITCompilationStarted => dynamic_method_jit_compilation_started(id: FunctionID, safe_to_block: BOOL, il_header: RawPtr, il_len: ULONG);
    93 DynamicMethodJITCompilationFinished => dynamic_method_jit_compilation_finished(id: FunctionID, hr: HRESULT, safe_to_block: BOOL);
    94 DynamicMethodUnloaded => dynamic_method_unloaded(id: FunctionID);
    95 EventPipeEventDelivered => event_pipe_event_delivered(provider: usize, event_id: u32, event_version: u32, metadata_len: ULONG, metadata: *const u8, data_len: ULONG, data: *const u8, activity: RawPtr, related_activity: RawPtr, thread: ThreadID, frame_count: ULONG, frames: *const usize);
    96 EventPipeProviderCreated => event_pipe_provider_created(provider: usize);
    97 LoadAsNotificationOnly => load_as_notification_only(notification_only: OutBool);
}

/// The COM object handed to the runtime: vtable pointer first, then a refcount and the callbacks.
#[repr(C)]
pub struct ComObject<T: ProfilerCallback> {
    vtbl: &'static CallbackVtbl,
    refs: AtomicU32,
    inner: T,
}

impl<T: ProfilerCallback> ComObject<T> {
    const VTBL_REF: &'static CallbackVtbl = &Self::VTBL;

    /// Allocates the object with one reference and returns it as a COM pointer. The object is never
    /// freed: the runtime may call it after the last `Release` during shutdown, and there is only one.
    pub fn create(inner: T) -> *mut c_void {
        let obj = Box::new(ComObject { vtbl: Self::VTBL_REF, refs: AtomicU32::new(1), inner });
        Box::into_raw(obj) as *mut c_void
    }

    /// The callbacks of an object made by [`ComObject::create`].
    ///
    /// # Safety
    /// `this` must come from `ComObject::<T>::create`.
    pub unsafe fn inner<'a>(this: *mut c_void) -> &'a T {
        // Safety: guaranteed by the caller; the object is never freed.
        unsafe { &(*(this as *const ComObject<T>)).inner }
    }

    fn dispatch(&self, name: &'static str, f: impl FnOnce(&T) -> CallbackResult) -> HRESULT {
        let inner = &self.inner;
        let is_init = name == "Initialize" || name == "InitializeForAttach";
        match catch_unwind(AssertUnwindSafe(|| f(inner))) {
            Ok(Ok(())) => S_OK,
            Ok(Err(e)) => {
                let _ = catch_unwind(AssertUnwindSafe(|| inner.on_error(name, &e)));
                if is_init {
                    E_FAIL
                } else {
                    S_OK
                }
            }
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "panic".to_string());
                let e = CallbackError(format!("panic: {msg}"));
                let _ = catch_unwind(AssertUnwindSafe(|| inner.on_error(name, &e)));
                if is_init {
                    E_FAIL
                } else {
                    S_OK
                }
            }
        }
    }

    /// True when `iid` names an interface this object implements.
    pub fn implements(iid: &GUID) -> bool {
        *iid == IID_IUNKNOWN || IID_ICORPROFILERCALLBACK.contains(iid)
    }

    unsafe extern "system" fn query_interface(this: *mut c_void, iid: *const GUID, out: *mut *mut c_void) -> HRESULT {
        let r = catch_unwind(|| {
            if out.is_null() {
                return E_POINTER;
            }
            // Safety: `iid` and `out` are valid per the COM contract (checked non-null).
            unsafe {
                if iid.is_null() || !Self::implements(&*iid) {
                    *out = std::ptr::null_mut();
                    return E_NOINTERFACE;
                }
                *out = this;
                Self::add_ref(this);
            }
            S_OK
        });
        r.unwrap_or(E_FAIL)
    }

    unsafe extern "system" fn add_ref(this: *mut c_void) -> ULONG {
        // Safety: `this` is our object (never freed).
        let obj = unsafe { &*(this as *const ComObject<T>) };
        obj.refs.fetch_add(1, Ordering::AcqRel).wrapping_add(1)
    }

    unsafe extern "system" fn release(this: *mut c_void) -> ULONG {
        // Safety: `this` is our object (never freed).
        let obj = unsafe { &*(this as *const ComObject<T>) };
        // One atomic step: two racing releases of the last reference cannot both decrement (an
        // over-release stays at 0: never underflow, never free).
        match obj.refs.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)) {
            Ok(prev) => prev - 1,
            Err(_) => 0,
        }
    }
}

/// The vtable of the class factory returned by `DllGetClassObject`.
#[repr(C)]
pub struct ClassFactoryVtbl {
    pub query_interface: unsafe extern "system" fn(*mut c_void, *const GUID, *mut *mut c_void) -> HRESULT,
    pub add_ref: unsafe extern "system" fn(*mut c_void) -> ULONG,
    pub release: unsafe extern "system" fn(*mut c_void) -> ULONG,
    pub create_instance: unsafe extern "system" fn(*mut c_void, *mut c_void, *const GUID, *mut *mut c_void) -> HRESULT,
    pub lock_server: unsafe extern "system" fn(*mut c_void, BOOL) -> HRESULT,
}

/// A static class factory: `CreateInstance` calls `make` for a new profiler object (or gets
/// `None` when one already exists) and QIs it for the requested IID; aggregation is refused.
#[repr(C)]
pub struct ClassFactory {
    vtbl: &'static ClassFactoryVtbl,
    make: fn() -> Option<*mut c_void>,
}

// Safety: the factory is immutable (a vtable reference and a plain fn pointer).
unsafe impl Sync for ClassFactory {}

impl ClassFactory {
    pub const fn new(make: fn() -> Option<*mut c_void>) -> ClassFactory {
        ClassFactory { vtbl: &FACTORY_VTBL, make }
    }

    /// `DllGetClassObject` for this factory: checks the CLSID and returns the factory for
    /// IID_IClassFactory/IID_IUnknown.
    ///
    /// # Safety
    /// `clsid`, `iid` and `out` are the raw arguments of `DllGetClassObject`.
    pub unsafe fn get_class_object(
        &'static self,
        expected: &GUID,
        clsid: *const GUID,
        iid: *const GUID,
        out: *mut *mut c_void,
    ) -> HRESULT {
        if out.is_null() {
            return E_POINTER;
        }
        // Safety: pointers checked non-null; valid per the COM contract.
        unsafe {
            *out = std::ptr::null_mut();
            if clsid.is_null() || iid.is_null() {
                return E_INVALIDARG;
            }
            if *clsid != *expected {
                return CLASS_E_CLASSNOTAVAILABLE;
            }
            if *iid != IID_ICLASSFACTORY && *iid != IID_IUNKNOWN {
                return E_NOINTERFACE;
            }
            *out = self as *const ClassFactory as *mut c_void;
        }
        S_OK
    }
}

static FACTORY_VTBL: ClassFactoryVtbl = ClassFactoryVtbl {
    query_interface: factory_qi,
    add_ref: factory_add_ref,
    release: factory_release,
    create_instance: factory_create_instance,
    lock_server: factory_lock_server,
};

unsafe extern "system" fn factory_qi(this: *mut c_void, iid: *const GUID, out: *mut *mut c_void) -> HRESULT {
    if out.is_null() {
        return E_POINTER;
    }
    // Safety: valid per the COM contract (checked non-null).
    unsafe {
        if !iid.is_null() && (*iid == IID_ICLASSFACTORY || *iid == IID_IUNKNOWN) {
            *out = this;
            return S_OK;
        }
        *out = std::ptr::null_mut();
    }
    E_NOINTERFACE
}

unsafe extern "system" fn factory_add_ref(_this: *mut c_void) -> ULONG {
    1 // static object
}

unsafe extern "system" fn factory_release(_this: *mut c_void) -> ULONG {
    1 // static object
}

unsafe extern "system" fn factory_create_instance(
    this: *mut c_void,
    outer: *mut c_void,
    iid: *const GUID,
    out: *mut *mut c_void,
) -> HRESULT {
    let r = catch_unwind(AssertUnwindSafe(|| {
        if out.is_null() {
            return E_POINTER;
        }
        // Safety: `out` checked non-null; `this` is our static factory.
        unsafe {
            *out = std::ptr::null_mut();
            if !outer.is_null() {
                return CLASS_E_NOAGGREGATION;
            }
            if iid.is_null() {
                return E_INVALIDARG;
            }
            let factory = &*(this as *const ClassFactory);
            let Some(obj) = (factory.make)() else {
                return CORPROF_E_PROFILER_CANCEL_ACTIVATION;
            };
            // QI through the object's own vtable (first word), honouring the requested IID,
            // then drop the creation reference.
            let vtbl = *(obj as *const &CallbackVtbl);
            let hr = (vtbl.query_interface)(obj, iid, out);
            (vtbl.release)(obj);
            hr
        }
    }));
    r.unwrap_or(E_FAIL)
}

unsafe extern "system" fn factory_lock_server(_this: *mut c_void, _lock: BOOL) -> HRESULT {
    S_OK
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::size_of;

    #[test]
    fn callback_vtable_has_98_slots_in_idl_order() {
        assert_eq!(size_of::<CallbackVtbl>(), 98 * size_of::<usize>());
        for (i, (_, slot)) in CALLBACK_SLOTS.iter().enumerate() {
            assert_eq!(*slot, i + 3, "slot numbering");
        }
        let find = |n: &str| CALLBACK_SLOTS.iter().find(|(name, _)| *name == n).unwrap().1;
        assert_eq!(find("ExceptionCLRCatcherExecute"), 71);
        assert_eq!(find("ThreadNameChanged"), 72);
        assert_eq!(find("InitializeForAttach"), 80);
        assert_eq!(find("EventPipeEventDelivered"), 95);
        assert_eq!(find("LoadAsNotificationOnly"), 97);
    }

    struct Nop;
    impl ProfilerCallback for Nop {
        fn thread_created(&self, _id: ThreadID) -> CallbackResult {
            panic!("boom")
        }
    }

    static FACTORY: ClassFactory = ClassFactory::new(|| Some(ComObject::create(Nop)));
    const CLSID: GUID = GUID::new(1, 2, 3, 4, 5);

    #[test]
    fn factory_honours_iid_and_rejects_aggregation() {
        let mut cf: *mut c_void = std::ptr::null_mut();
        unsafe {
            assert_eq!(
                FACTORY.get_class_object(&CLSID, &GUID::new(9, 9, 9, 9, 9), &IID_ICLASSFACTORY, &mut cf),
                CLASS_E_CLASSNOTAVAILABLE
            );
            assert_eq!(FACTORY.get_class_object(&CLSID, &CLSID, &IID_ICLASSFACTORY, &mut cf), S_OK);
            let vt = &**(cf as *const &ClassFactoryVtbl);
            let mut obj: *mut c_void = std::ptr::null_mut();
            let mut dummy = 0u8;
            assert_eq!(
                (vt.create_instance)(cf, &mut dummy as *mut u8 as *mut c_void, &IID_ICORPROFILERCALLBACK[1], &mut obj),
                CLASS_E_NOAGGREGATION
            );
            assert!(obj.is_null());
            assert_eq!((vt.create_instance)(cf, std::ptr::null_mut(), &IID_ICLASSFACTORY, &mut obj), E_NOINTERFACE);
            assert!(obj.is_null());
            for iid in IID_ICORPROFILERCALLBACK.iter().chain([IID_IUNKNOWN].iter()) {
                assert_eq!((vt.create_instance)(cf, std::ptr::null_mut(), iid, &mut obj), S_OK);
                assert!(!obj.is_null());
                let cb = &**(obj as *const &CallbackVtbl);
                let mut again: *mut c_void = std::ptr::null_mut();
                assert_eq!((cb.query_interface)(obj, &IID_ICORPROFILERCALLBACK[10], &mut again), S_OK);
                assert_eq!(again, obj, "one object answers every version");
                assert_eq!((cb.query_interface)(obj, &IID_ICORPROFILERINFO[0], &mut again), E_NOINTERFACE);
                assert!(again.is_null());
                // A panicking callback is caught and reported as S_OK.
                assert_eq!((cb.thread_created)(obj, 42), S_OK);
                assert_eq!((cb.shutdown)(obj), S_OK);
            }
        }
    }

    #[test]
    fn racing_releases_never_underflow_the_count() {
        let obj = ComObject::create(Nop);
        // Safety: `obj` is a ComObject<Nop>, never freed; its vtable starts with IUnknown.
        let cb = unsafe { &**(obj as *const &CallbackVtbl) };
        let addr = obj as usize;
        assert_eq!(unsafe { (cb.release)(obj) }, 0, "created with one reference");
        for _ in 0..200 {
            unsafe { (cb.add_ref)(obj) };
            assert_eq!(unsafe { (cb.add_ref)(obj) }, 2);
            let threads: Vec<_> =
                (0..4).map(|_| std::thread::spawn(move || unsafe { (cb.release)(addr as *mut c_void) })).collect();
            let left: Vec<ULONG> = threads.into_iter().map(|t| t.join().unwrap()).collect();
            // Four releases of two references: counts 1 and 0 once each, then over-releases at 0.
            let mut sorted = left.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, vec![0, 0, 0, 1], "{left:?}");
        }
    }
}
