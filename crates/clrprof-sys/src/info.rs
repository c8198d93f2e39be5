//! Safe wrappers over `ICorProfilerInfo1..15`. Each wrapper checks that the runtime's interface
//! version has the slot, checks the HRESULT before reading out-parameters, and sizes string
//! buffers from the runtime's answer.

use std::ffi::c_void;
use std::mem::transmute;

use crate::consts::*;
use crate::metadata::MetaDataImport;
use crate::raw::check;
use crate::types::*;

// The helpers the agent takes with the wrappers (callbacks read runtime-owned arrays and strings).
pub use crate::raw::{
    module_image_bytes, slice_from_raw, to_utf16z, utf16_from_raw, utf16_to_string, HrError, HrResult,
};

/// Calls a "two-call" string API: first with a stack-sized buffer, again with the exact size when
/// the name did not fit.
fn read_string(mut call: impl FnMut(u32, *mut u32, *mut u16) -> HRESULT, method: &'static str) -> HrResult<String> {
    let mut buf = vec![0u16; 512];
    let mut needed: u32 = 0;
    check(method, call(buf.len() as u32, &mut needed, buf.as_mut_ptr()))?;
    if needed as usize > buf.len() {
        buf = vec![0u16; needed as usize];
        check(method, call(buf.len() as u32, &mut needed, buf.as_mut_ptr()))?;
    }
    let n = (needed as usize).min(buf.len());
    Ok(utf16_to_string(&buf[..n]))
}

/// Runtime version as reported by `GetRuntimeInformation`.
#[derive(Clone, Debug, Default)]
pub struct RuntimeInfo {
    pub runtime_type: u32,
    pub major: u16,
    pub minor: u16,
    pub build: u16,
    pub qfe: u16,
    pub version_string: String,
}

/// `ICorProfilerInfoN`, N being the newest version the runtime answered.
#[derive(Clone, Copy, Debug)]
pub struct ProfilerInfo {
    ptr: *mut c_void,
    version: u32,
}

// Safety: ICorProfilerInfo is free-threaded; the runtime documents it as callable from any thread.
unsafe impl Send for ProfilerInfo {}
// Safety: as above.
unsafe impl Sync for ProfilerInfo {}

/// `StackSnapshotCallback`.
pub type StackSnapshotCallback =
    unsafe extern "system" fn(FunctionID, usize, usize, u32, *const u8, *mut c_void) -> HRESULT;
/// `FunctionIDMapper2`.
pub type FunctionIdMapper2 = unsafe extern "system" fn(FunctionID, *mut c_void, *mut BOOL) -> usize;

macro_rules! slot {
    ($self:ident, $idx:expr, $name:literal, fn($($t:ty),* $(,)?)) => {{
        let raw = $self.slot_checked($idx, $name)?;
        // Safety: the vtable has slot $idx (checked) and it has this signature in corprof.idl.
        let f: unsafe extern "system" fn(*mut c_void $(, $t)*) -> HRESULT = unsafe { transmute(raw) };
        f
    }};
}

impl ProfilerInfo {
    /// QIs the runtime's `IUnknown` for the newest `ICorProfilerInfoN` it implements.
    ///
    /// # Safety
    /// `unknown` must be the `IUnknown*` given to `Initialize`/`InitializeForAttach`.
    pub unsafe fn from_unknown(unknown: *const c_void) -> Option<ProfilerInfo> {
        if unknown.is_null() {
            return None;
        }
        type Qi = unsafe extern "system" fn(*mut c_void, *const GUID, *mut *mut c_void) -> HRESULT;
        // Safety: a COM object's first word is its vtable; slot 0 is QueryInterface.
        let qi: Qi = unsafe { transmute(**(unknown as *const *const usize)) };
        for v in (1..=IID_ICORPROFILERINFO.len()).rev() {
            let mut out: *mut c_void = std::ptr::null_mut();
            // Safety: a valid QI call; `out` receives an AddRef'd pointer kept for the process lifetime.
            let hr = unsafe { qi(unknown as *mut c_void, &IID_ICORPROFILERINFO[v - 1], &mut out) };
            if hr >= 0 && !out.is_null() {
                return Some(ProfilerInfo { ptr: out, version: v as u32 });
            }
        }
        None
    }

    /// The interface version obtained (1..=15).
    pub fn version(&self) -> u32 {
        self.version
    }

    fn slot_checked(&self, idx: usize, method: &'static str) -> HrResult<usize> {
        if idx >= INFO_VTABLE_LEN[self.version as usize - 1] {
            return Err(HrError { method, hr: E_NOTIMPL });
        }
        // Safety: `ptr` is a live COM object whose vtable has INFO_VTABLE_LEN[version-1] slots.
        Ok(unsafe { *(*(self.ptr as *const *const usize)).add(idx) })
    }

    pub fn set_event_mask2(&self, low: u32, high: u32) -> HrResult<()> {
        if self.version < 5 {
            if high != 0 {
                return Err(HrError { method: "SetEventMask2", hr: E_NOTIMPL });
            }
            let f = slot!(self, 16, "SetEventMask", fn(u32));
            // Safety: valid call on a live interface.
            return check("SetEventMask", unsafe { f(self.ptr, low) });
        }
        let f = slot!(self, 82, "SetEventMask2", fn(u32, u32));
        // Safety: valid call on a live interface.
        check("SetEventMask2", unsafe { f(self.ptr, low, high) })
    }

    pub fn get_event_mask2(&self) -> HrResult<(u32, u32)> {
        let f = slot!(self, 81, "GetEventMask2", fn(*mut u32, *mut u32));
        let (mut lo, mut hi) = (0u32, 0u32);
        // Safety: valid call with writable out-params.
        check("GetEventMask2", unsafe { f(self.ptr, &mut lo, &mut hi) })?;
        Ok((lo, hi))
    }

    pub fn get_runtime_information(&self) -> HrResult<RuntimeInfo> {
        let f = slot!(
            self,
            67,
            "GetRuntimeInformation",
            fn(*mut u16, *mut u32, *mut u16, *mut u16, *mut u16, *mut u16, u32, *mut u32, *mut u16)
        );
        let mut r = RuntimeInfo::default();
        let mut clr_id = 0u16;
        let (mut rt, mut ma, mut mi, mut bu, mut qf) = (0u32, 0u16, 0u16, 0u16, 0u16);
        r.version_string = read_string(
            // Safety: valid call; buffers sized by `read_string`.
            |cch, pcch, buf| unsafe {
                f(self.ptr, &mut clr_id, &mut rt, &mut ma, &mut mi, &mut bu, &mut qf, cch, pcch, buf)
            },
            "GetRuntimeInformation",
        )?;
        r.runtime_type = rt;
        r.major = ma;
        r.minor = mi;
        r.build = bu;
        r.qfe = qf;
        Ok(r)
    }

    /// The current thread's `ThreadID` (`CORPROF_E_NOT_MANAGED_THREAD` on runtime-internal threads).
    pub fn get_current_thread_id(&self) -> HrResult<ThreadID> {
        let f = slot!(self, 13, "GetCurrentThreadID", fn(*mut ThreadID));
        let mut id = 0;
        // Safety: valid call with writable out-param.
        check("GetCurrentThreadID", unsafe { f(self.ptr, &mut id) })?;
        Ok(id)
    }

    /// The OS thread id (kernel tid on Linux) of a managed thread.
    pub fn get_thread_info(&self, thread: ThreadID) -> HrResult<u32> {
        let f = slot!(self, 12, "GetThreadInfo", fn(ThreadID, *mut u32));
        let mut tid = 0u32;
        // Safety: valid call with writable out-param.
        check("GetThreadInfo", unsafe { f(self.ptr, thread, &mut tid) })?;
        Ok(tid)
    }

    pub fn get_app_domain_info(&self, id: AppDomainID) -> HrResult<String> {
        let f = slot!(self, 25, "GetAppDomainInfo", fn(AppDomainID, u32, *mut u32, *mut u16, *mut usize));
        let mut pid = 0usize;
        // Safety: valid call; buffers sized by `read_string`.
        read_string(|cch, pcch, buf| unsafe { f(self.ptr, id, cch, pcch, buf, &mut pid) }, "GetAppDomainInfo")
    }

    /// (name, app domain, manifest module).
    pub fn get_assembly_info(&self, id: AssemblyID) -> HrResult<(String, AppDomainID, ModuleID)> {
        let f = slot!(
            self,
            26,
            "GetAssemblyInfo",
            fn(AssemblyID, u32, *mut u32, *mut u16, *mut AppDomainID, *mut ModuleID)
        );
        let (mut ad, mut m) = (0usize, 0usize);
        // Safety: valid call; buffers sized by `read_string`.
        let name = read_string(
            |cch, pcch, buf| unsafe { f(self.ptr, id, cch, pcch, buf, &mut ad, &mut m) },
            "GetAssemblyInfo",
        )?;
        Ok((name, ad, m))
    }

    /// `COR_PRF_MODULE_FLAGS` of a module (`GetModuleInfo2`); collectible = 0x8.
    pub fn get_module_flags(&self, id: ModuleID) -> HrResult<u32> {
        self.get_module_image(id).map(|(_, flags)| flags)
    }

    /// (base load address, `COR_PRF_MODULE_FLAGS`) of a module (`GetModuleInfo2`): the address is
    /// 0 for modules without an image (dynamic ones); the flags tell a flat layout (0x20: the
    /// image as its file) from a mapped one (sections at their RVAs).
    pub fn get_module_image(&self, id: ModuleID) -> HrResult<(usize, u32)> {
        let f = slot!(
            self,
            70,
            "GetModuleInfo2",
            fn(ModuleID, *mut usize, u32, *mut u32, *mut u16, *mut AssemblyID, *mut u32)
        );
        let (mut base, mut asm, mut flags) = (0usize, 0usize, 0u32);
        // Safety: valid call; the name buffer is sized by `read_string`.
        read_string(
            |cch, pcch, buf| unsafe { f(self.ptr, id, &mut base, cch, pcch, buf, &mut asm, &mut flags) },
            "GetModuleInfo2",
        )?;
        Ok((base, flags))
    }

    /// (class, module, token) of a function (`GetFunctionInfo`): cheaper than `GetFunctionInfo2`.
    pub fn get_function_info(&self, id: FunctionID) -> HrResult<(ClassID, ModuleID, mdToken)> {
        let f = slot!(self, 15, "GetFunctionInfo", fn(FunctionID, *mut ClassID, *mut ModuleID, *mut mdToken));
        let (mut c, mut m, mut t) = (0usize, 0usize, 0u32);
        // Safety: valid call with writable out-params.
        check("GetFunctionInfo", unsafe { f(self.ptr, id, &mut c, &mut m, &mut t) })?;
        Ok((c, m, t))
    }

    /// The name of the assembly module `id` belongs to (`GetModuleInfo`, then `GetAssemblyInfo`).
    pub fn module_assembly_name(&self, id: ModuleID) -> HrResult<String> {
        let (_, _, asm) = self.get_module_info(id)?;
        Ok(self.get_assembly_info(asm)?.0)
    }

    /// (path, base load address, assembly).
    pub fn get_module_info(&self, id: ModuleID) -> HrResult<(String, usize, AssemblyID)> {
        let f = slot!(self, 20, "GetModuleInfo", fn(ModuleID, *mut usize, u32, *mut u32, *mut u16, *mut AssemblyID));
        let (mut base, mut asm) = (0usize, 0usize);
        // Safety: valid call; buffers sized by `read_string`.
        let name = read_string(
            |cch, pcch, buf| unsafe { f(self.ptr, id, &mut base, cch, pcch, buf, &mut asm) },
            "GetModuleInfo",
        )?;
        Ok((name, base, asm))
    }

    /// The module's metadata importer (`IMetaDataImport2`, else `IMetaDataImport`), or `None` for
    /// modules without metadata (resource modules).
    pub fn get_module_metadata(&self, id: ModuleID) -> HrResult<Option<MetaDataImport>> {
        let f = slot!(self, 21, "GetModuleMetaData", fn(ModuleID, u32, *const GUID, *mut *mut c_void));
        for (iid, v2) in [(&IID_IMETADATAIMPORT2, true), (&IID_IMETADATAIMPORT, false)] {
            let mut out: *mut c_void = std::ptr::null_mut();
            // Safety: valid call (ofRead = 0) with writable out-param.
            let hr = unsafe { f(self.ptr, id, 0, iid, &mut out) };
            if hr >= 0 && !out.is_null() {
                // Safety: `out` is an AddRef'd IMetaDataImport(2) pointer whose ownership we take.
                return Ok(Some(unsafe { MetaDataImport::from_raw(out, v2) }));
            }
            if hr < 0 && hr != E_NOINTERFACE {
                return Err(HrError { method: "GetModuleMetaData", hr });
            }
        }
        Ok(None)
    }

    /// (class, module, token, type arguments). `class` is 0 for code shared between
    /// reference-type instantiations.
    pub fn get_function_info2(&self, id: FunctionID) -> HrResult<(ClassID, ModuleID, mdToken, Vec<ClassID>)> {
        let f = slot!(
            self,
            38,
            "GetFunctionInfo2",
            fn(FunctionID, usize, *mut ClassID, *mut ModuleID, *mut mdToken, u32, *mut u32, *mut ClassID)
        );
        let (mut c, mut m, mut t, mut n) = (0usize, 0usize, 0u32, 0u32);
        let mut args = [0usize; 16];
        // Safety: valid call; the array holds 16 entries as announced.
        check("GetFunctionInfo2", unsafe {
            f(self.ptr, id, 0, &mut c, &mut m, &mut t, 16, &mut n, args.as_mut_ptr())
        })?;
        let mut v = args[..(n as usize).min(16)].to_vec();
        if n as usize > 16 {
            v = vec![0usize; n as usize];
            // Safety: as above with an exact-size array.
            check("GetFunctionInfo2", unsafe {
                f(self.ptr, id, 0, &mut c, &mut m, &mut t, n, &mut n, v.as_mut_ptr())
            })?;
            v.truncate(n as usize);
        }
        Ok((c, m, t, v))
    }

    /// (module, typedef token, parent class, type arguments). Arrays and other composite
    /// classes fail with `CORPROF_E_CLASSID_IS_ARRAY`/`_COMPOSITE`.
    pub fn get_class_id_info2(&self, id: ClassID) -> HrResult<(ModuleID, mdTypeDef, ClassID, Vec<ClassID>)> {
        let f = slot!(
            self,
            41,
            "GetClassIDInfo2",
            fn(ClassID, *mut ModuleID, *mut mdTypeDef, *mut ClassID, u32, *mut u32, *mut ClassID)
        );
        let (mut m, mut t, mut p, mut n) = (0usize, 0u32, 0usize, 0u32);
        let mut args = [0usize; 16];
        // Safety: valid call; the array holds 16 entries as announced.
        check("GetClassIDInfo2", unsafe { f(self.ptr, id, &mut m, &mut t, &mut p, 16, &mut n, args.as_mut_ptr()) })?;
        let mut v = args[..(n as usize).min(16)].to_vec();
        if n as usize > 16 {
            v = vec![0usize; n as usize];
            // Safety: as above with an exact-size array.
            check("GetClassIDInfo2", unsafe { f(self.ptr, id, &mut m, &mut t, &mut p, n, &mut n, v.as_mut_ptr()) })?;
            v.truncate(n as usize);
        }
        Ok((m, t, p, v))
    }

    /// (element type, element class, rank) when `id` is an array class, `None` otherwise.
    pub fn is_array_class(&self, id: ClassID) -> HrResult<Option<(u32, ClassID, u32)>> {
        let f = slot!(self, 11, "IsArrayClass", fn(ClassID, *mut u32, *mut ClassID, *mut u32));
        let (mut et, mut base, mut rank) = (0u32, 0usize, 0u32);
        // Safety: valid call with writable out-params.
        let hr = unsafe { f(self.ptr, id, &mut et, &mut base, &mut rank) };
        check("IsArrayClass", hr)?;
        Ok((hr == S_OK).then_some((et, base, rank)))
    }

    /// `IsFunctionDynamic` (Info8): true for a method without metadata (a `DynamicMethod`, a
    /// compiled expression, an IL stub).
    pub fn is_function_dynamic(&self, id: FunctionID) -> HrResult<bool> {
        let f = slot!(self, 87, "IsFunctionDynamic", fn(FunctionID, *mut BOOL));
        let mut b: BOOL = 0;
        // Safety: valid call with a writable BOOL.
        check("IsFunctionDynamic", unsafe { f(self.ptr, id, &mut b) })?;
        Ok(b != 0)
    }

    /// `GetDynamicFunctionInfo` (Info8): the module and the name a dynamic method was given
    /// (`new DynamicMethod("Name", …)`, `lambda_method12`, `IL_STUB_PInvoke`).
    pub fn get_dynamic_function_info(&self, id: FunctionID) -> HrResult<(ModuleID, String)> {
        let f = slot!(
            self,
            89,
            "GetDynamicFunctionInfo",
            fn(FunctionID, *mut ModuleID, *mut *const u8, *mut u32, u32, *mut u32, *mut u16)
        );
        let mut module: ModuleID = 0;
        let name = read_string(
            |n, needed, buf| {
                let (mut sig, mut sig_len) = (std::ptr::null::<u8>(), 0u32);
                // Safety: valid call; `buf` holds `n` WCHARs.
                unsafe { f(self.ptr, id, &mut module, &mut sig, &mut sig_len, n, needed, buf) }
            },
            "GetDynamicFunctionInfo",
        )?;
        Ok((module, name))
    }

    /// Native code regions of a compiled function.
    pub fn get_code_info2(&self, id: FunctionID) -> HrResult<Vec<CodeInfo>> {
        let f = slot!(self, 42, "GetCodeInfo2", fn(FunctionID, u32, *mut u32, *mut CodeInfo));
        let mut infos = [CodeInfo::default(); 4];
        let mut n = 0u32;
        // Safety: valid call; the array holds 4 entries as announced.
        check("GetCodeInfo2", unsafe { f(self.ptr, id, 4, &mut n, infos.as_mut_ptr()) })?;
        let mut v = infos[..(n as usize).min(4)].to_vec();
        if n as usize > 4 {
            v = vec![CodeInfo::default(); n as usize];
            // Safety: as above with an exact-size array.
            check("GetCodeInfo2", unsafe { f(self.ptr, id, n, &mut n, v.as_mut_ptr()) })?;
            v.truncate(n as usize);
        }
        Ok(v)
    }

    /// The IL-to-native map of one native code version, by its start address (ICorProfilerInfo9
    /// `GetILToNativeMapping3`): triples (IL offset, native start offset, native end offset), the
    /// special IL offsets as the runtime gives them (0xFFFFFFFF no mapping, 0xFFFFFFFE prolog,
    /// 0xFFFFFFFD epilog).
    pub fn get_il_to_native_mapping3(&self, start: usize) -> HrResult<Vec<[u32; 3]>> {
        let f = slot!(self, 91, "GetILToNativeMapping3", fn(usize, u32, *mut u32, *mut [u32; 3]));
        let mut n = 0u32;
        // Safety: valid call; a zero-size array asks for the count only.
        let hr = unsafe { f(self.ptr, start, 0, &mut n, std::ptr::null_mut()) };
        // The count call returns S_OK or an insufficient-buffer HRESULT with the count set.
        if n == 0 {
            check("GetILToNativeMapping3", hr)?;
            return Ok(Vec::new());
        }
        let mut v = vec![[0u32; 3]; n as usize];
        let cap = n;
        // Safety: valid call; the array holds `cap` entries as announced (COR_DEBUG_IL_TO_NATIVE_MAP
        // is three ULONG32s).
        check("GetILToNativeMapping3", unsafe { f(self.ptr, start, cap, &mut n, v.as_mut_ptr()) })?;
        v.truncate((n as usize).min(cap as usize));
        Ok(v)
    }

    /// Start addresses of every native code version of a function (ICorProfilerInfo9): each
    /// tier of tiered compilation has its own.
    pub fn get_native_code_start_addresses(&self, id: FunctionID) -> HrResult<Vec<usize>> {
        let f = slot!(self, 90, "GetNativeCodeStartAddresses", fn(FunctionID, ReJITID, u32, *mut u32, *mut usize));
        let mut buf = [0usize; 8];
        let mut n = 0u32;
        // Safety: valid call; the array holds 8 entries as announced.
        check("GetNativeCodeStartAddresses", unsafe { f(self.ptr, id, 0, 8, &mut n, buf.as_mut_ptr()) })?;
        let mut v = buf[..(n as usize).min(8)].to_vec();
        if n as usize > 8 {
            v = vec![0usize; n as usize];
            // Safety: as above with an exact-size array.
            check("GetNativeCodeStartAddresses", unsafe { f(self.ptr, id, 0, n, &mut n, v.as_mut_ptr()) })?;
            v.truncate(n as usize);
        }
        Ok(v)
    }

    /// Native code regions of one code version, by its start address (ICorProfilerInfo9).
    pub fn get_code_info4(&self, start: usize) -> HrResult<Vec<CodeInfo>> {
        let f = slot!(self, 92, "GetCodeInfo4", fn(usize, u32, *mut u32, *mut CodeInfo));
        let mut infos = [CodeInfo::default(); 4];
        let mut n = 0u32;
        // Safety: valid call; the array holds 4 entries as announced.
        check("GetCodeInfo4", unsafe { f(self.ptr, start, 4, &mut n, infos.as_mut_ptr()) })?;
        let mut v = infos[..(n as usize).min(4)].to_vec();
        if n as usize > 4 {
            v = vec![CodeInfo::default(); n as usize];
            // Safety: as above with an exact-size array.
            check("GetCodeInfo4", unsafe { f(self.ptr, start, n, &mut n, v.as_mut_ptr()) })?;
            v.truncate(n as usize);
        }
        Ok(v)
    }

    pub fn get_class_from_object(&self, object: ObjectID) -> HrResult<ClassID> {
        let f = slot!(self, 3, "GetClassFromObject", fn(ObjectID, *mut ClassID));
        let mut c = 0usize;
        // Safety: valid call with writable out-param.
        check("GetClassFromObject", unsafe { f(self.ptr, object, &mut c) })?;
        Ok(c)
    }

    /// The class of a TypeDef of a module (`GetClassFromToken`). Beware: the runtime loads the
    /// type when it is not loaded yet; generic types fail with `CORPROF_E_TYPE_IS_PARAMETERIZED`.
    pub fn get_class_from_token(&self, module: ModuleID, typedef: mdTypeDef) -> HrResult<ClassID> {
        let f = slot!(self, 4, "GetClassFromToken", fn(ModuleID, mdTypeDef, *mut ClassID));
        let mut c = 0usize;
        // Safety: valid call with writable out-param.
        check("GetClassFromToken", unsafe { f(self.ptr, module, typedef, &mut c) })?;
        Ok(c)
    }

    /// The address of a (non-thread) static field of a class in an app domain
    /// (`GetAppDomainStaticAddress`): for a reference-typed field its slot, for a value-typed one
    /// the boxed value's data. `CORPROF_E_DATAINCOMPLETE` before the class is initialised.
    pub fn get_app_domain_static_address(
        &self,
        class: ClassID,
        field: mdToken,
        domain: AppDomainID,
    ) -> HrResult<usize> {
        let f = slot!(self, 50, "GetAppDomainStaticAddress", fn(ClassID, mdToken, AppDomainID, *mut usize));
        let mut a = 0usize;
        // Safety: valid call with writable out-param.
        check("GetAppDomainStaticAddress", unsafe { f(self.ptr, class, field, domain, &mut a) })?;
        Ok(a)
    }

    /// The managed function whose code contains `ip` (not signal-safe).
    pub fn get_function_from_ip(&self, ip: usize) -> HrResult<FunctionID> {
        let f = slot!(self, 7, "GetFunctionFromIP", fn(usize, *mut FunctionID));
        let mut id = 0usize;
        // Safety: valid call with writable out-param.
        check("GetFunctionFromIP", unsafe { f(self.ptr, ip, &mut id) })?;
        Ok(id)
    }

    /// Registers the function-id mapper called as methods are JIT-compiled.
    ///
    /// # Safety
    /// `mapper` must accept `data` for the rest of the process lifetime.
    pub unsafe fn set_function_id_mapper2(&self, mapper: FunctionIdMapper2, data: *mut c_void) -> HrResult<()> {
        let f = slot!(self, 59, "SetFunctionIDMapper2", fn(FunctionIdMapper2, *mut c_void));
        // Safety: valid call; `mapper` lives for the process lifetime.
        check("SetFunctionIDMapper2", unsafe { f(self.ptr, mapper, data) })
    }

    /// Installs fast-path ELT hooks (raw code addresses of naked stubs).
    pub fn set_enter_leave_function_hooks3(&self, enter: usize, leave: usize, tailcall: usize) -> HrResult<()> {
        let f = slot!(self, 61, "SetEnterLeaveFunctionHooks3", fn(usize, usize, usize));
        // Safety: valid call; the hooks live for the process lifetime.
        check("SetEnterLeaveFunctionHooks3", unsafe { f(self.ptr, enter, leave, tailcall) })
    }

    /// Must be called once on a native thread before it suspends the runtime.
    pub fn initialize_current_thread(&self) -> HrResult<()> {
        let f = slot!(self, 72, "InitializeCurrentThread", fn());
        // Safety: valid call.
        check("InitializeCurrentThread", unsafe { f(self.ptr) })
    }

    pub fn suspend_runtime(&self) -> HrResult<()> {
        let f = slot!(self, 97, "SuspendRuntime", fn());
        // Safety: valid call.
        check("SuspendRuntime", unsafe { f(self.ptr) })
    }

    pub fn resume_runtime(&self) -> HrResult<()> {
        let f = slot!(self, 98, "ResumeRuntime", fn());
        // Safety: valid call.
        check("ResumeRuntime", unsafe { f(self.ptr) })
    }

    /// Walks `thread`'s managed stack, calling `callback(function, ip, frame_info, ctx_len, ctx, data)`.
    ///
    /// # Safety
    /// `callback` must treat `data` as the type the caller passes.
    pub unsafe fn do_stack_snapshot(
        &self,
        thread: ThreadID,
        callback: StackSnapshotCallback,
        flags: u32,
        data: *mut c_void,
    ) -> HrResult<()> {
        let f =
            slot!(self, 36, "DoStackSnapshot", fn(ThreadID, StackSnapshotCallback, u32, *mut c_void, *const u8, u32));
        // Safety: valid call; no seed context.
        check("DoStackSnapshot", unsafe { f(self.ptr, thread, callback, flags, data, std::ptr::null(), 0) })
    }

    /// Every managed thread the runtime knows (`ICorProfilerInfo4::EnumThreads`).
    pub fn enum_threads(&self) -> HrResult<Vec<ThreadID>> {
        let f = slot!(self, 71, "EnumThreads", fn(*mut *mut c_void));
        let mut e: *mut c_void = std::ptr::null_mut();
        // Safety: valid call with writable out-param.
        check("EnumThreads", unsafe { f(self.ptr, &mut e) })?;
        if e.is_null() {
            return Ok(Vec::new());
        }
        // Safety: `e` is an ICorProfilerThreadEnum (IUnknown + Skip, Reset, Clone, GetCount, Next).
        unsafe {
            let vt = *(e as *const *const usize);
            let next: unsafe extern "system" fn(*mut c_void, u32, *mut ThreadID, *mut u32) -> HRESULT =
                transmute(*vt.add(7));
            let release: unsafe extern "system" fn(*mut c_void) -> u32 = transmute(*vt.add(2));
            let mut out = Vec::new();
            let mut buf = [0usize; 64];
            loop {
                let mut got = 0u32;
                let hr = next(e, buf.len() as u32, buf.as_mut_ptr(), &mut got);
                out.extend_from_slice(&buf[..(got as usize).min(buf.len())]);
                if hr != S_OK || got == 0 {
                    break;
                }
            }
            release(e);
            Ok(out)
        }
    }

    /// Every loaded module (`ICorProfilerInfo3::EnumModules`): the attach catch-up.
    pub fn enum_modules(&self) -> HrResult<Vec<ModuleID>> {
        let f = slot!(self, 66, "EnumModules", fn(*mut *mut c_void));
        let mut e: *mut c_void = std::ptr::null_mut();
        // Safety: valid call with writable out-param.
        check("EnumModules", unsafe { f(self.ptr, &mut e) })?;
        // Safety: `e` is an ICorProfilerModuleEnum (IUnknown + Skip, Reset, Clone, GetCount, Next).
        Ok(unsafe { drain_enum::<ModuleID>(e) })
    }

    /// Every function with JIT-compiled code (`ICorProfilerInfo4::EnumJITedFunctions2`, or
    /// `ICorProfilerInfo3::EnumJITedFunctions` on older interfaces): the attach catch-up. The
    /// runtime walks its JIT code heaps, so ReadyToRun code is not listed.
    pub fn enum_jited_functions(&self) -> HrResult<Vec<FunctionID>> {
        let (idx, name) = if self.version >= 4 { (79, "EnumJITedFunctions2") } else { (57, "EnumJITedFunctions") };
        let raw = self.slot_checked(idx, name)?;
        // Safety: both slots take one `ICorProfilerFunctionEnum**` out-param (corprof.idl).
        let f: unsafe extern "system" fn(*mut c_void, *mut *mut c_void) -> HRESULT = unsafe { transmute(raw) };
        let mut e: *mut c_void = std::ptr::null_mut();
        // Safety: valid call with writable out-param.
        check(name, unsafe { f(self.ptr, &mut e) })?;
        // Safety: `e` is an ICorProfilerFunctionEnum whose elements are COR_PRF_FUNCTION
        // { FunctionID, ReJITID }.
        let all = unsafe { drain_enum::<[usize; 2]>(e) };
        let mut ids: Vec<FunctionID> = all.into_iter().map(|f| f[0]).filter(|&f| f != 0).collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// Asks the runtime to detach the profiler (`ICorProfilerInfo3::RequestProfilerDetach`): once
    /// no thread is inside the profiler, the runtime calls `ProfilerDetachSucceeded` and unloads
    /// the library. Call it from the profiler's last own thread, which must then exit without
    /// calling the runtime again.
    pub fn request_profiler_detach(&self, expected_ms: u32) -> HrResult<()> {
        let f = slot!(self, 58, "RequestProfilerDetach", fn(u32));
        // Safety: valid call.
        check("RequestProfilerDetach", unsafe { f(self.ptr, expected_ms) })
    }

    /// Ends an in-process EventPipe session (`ICorProfilerInfo12::EventPipeStopSession`).
    pub fn event_pipe_stop_session(&self, session: u64) -> HrResult<()> {
        let f = slot!(self, 103, "EventPipeStopSession", fn(u64));
        // Safety: valid call.
        check("EventPipeStopSession", unsafe { f(self.ptr, session) })
    }

    pub fn get_token_and_metadata_from_function(&self, id: FunctionID) -> HrResult<(MetaDataImport, mdToken)> {
        let f = slot!(
            self,
            19,
            "GetTokenAndMetaDataFromFunction",
            fn(FunctionID, *const GUID, *mut *mut c_void, *mut mdToken)
        );
        let mut out: *mut c_void = std::ptr::null_mut();
        let mut tok = 0u32;
        // Safety: valid call with writable out-params.
        check("GetTokenAndMetaDataFromFunction", unsafe { f(self.ptr, id, &IID_IMETADATAIMPORT, &mut out, &mut tok) })?;
        if out.is_null() {
            return Err(HrError { method: "GetTokenAndMetaDataFromFunction", hr: E_POINTER });
        }
        // Safety: `out` is an AddRef'd IMetaDataImport whose ownership we take.
        Ok((unsafe { MetaDataImport::from_raw(out, false) }, tok))
    }

    /// Memory ranges of the GC heap by generation: `(generation, used bytes)` per range
    /// (`ICorProfilerInfo2::GetGenerationBounds`). Callable from `GarbageCollectionStarted`.
    pub fn get_generation_bounds(&self) -> HrResult<Vec<(u32, u64)>> {
        let f = slot!(self, 54, "GetGenerationBounds", fn(u32, *mut u32, *mut GenerationRange));
        let mut ranges = [GenerationRange::default(); 64];
        let mut n = 0u32;
        // Safety: valid call; the array holds 64 entries as announced.
        check("GetGenerationBounds", unsafe { f(self.ptr, ranges.len() as u32, &mut n, ranges.as_mut_ptr()) })?;
        let mut v: Vec<GenerationRange> = ranges[..(n as usize).min(ranges.len())].to_vec();
        if n as usize > ranges.len() {
            v = vec![GenerationRange::default(); n as usize];
            // Safety: as above with an exact-size array.
            check("GetGenerationBounds", unsafe { f(self.ptr, n, &mut n, v.as_mut_ptr()) })?;
            v.truncate(n as usize);
        }
        Ok(v.iter().map(|r| (r.generation, r.range_length as u64)).collect())
    }

    /// Size in bytes of an object (`ICorProfilerInfo4::GetObjectSize2`).
    pub fn get_object_size2(&self, object: ObjectID) -> HrResult<usize> {
        let f = slot!(self, 80, "GetObjectSize2", fn(ObjectID, *mut usize));
        let mut size = 0usize;
        // Safety: valid call with writable out-param.
        check("GetObjectSize2", unsafe { f(self.ptr, object, &mut size) })?;
        Ok(size)
    }

    /// Starts an in-process EventPipe session whose events arrive through
    /// `ICorProfilerCallback10::EventPipeEventDelivered` (`ICorProfilerInfo12::EventPipeStartSession`).
    /// Each provider is `(name, keywords, level)`.
    pub fn event_pipe_start_session(&self, providers: &[(&str, u64, u32)], rundown: bool) -> HrResult<u64> {
        let f = slot!(self, 101, "EventPipeStartSession", fn(u32, *const EventPipeProviderConfig, BOOL, *mut u64));
        let names: Vec<Vec<u16>> = providers.iter().map(|p| to_utf16z(p.0)).collect();
        let configs: Vec<EventPipeProviderConfig> = providers
            .iter()
            .zip(&names)
            .map(|(p, n)| EventPipeProviderConfig {
                provider_name: n.as_ptr(),
                keywords: p.1,
                logging_level: p.2,
                filter_data: std::ptr::null(),
            })
            .collect();
        let mut session = 0u64;
        // Safety: valid call; `configs` and the names it points to outlive the call.
        check("EventPipeStartSession", unsafe {
            f(self.ptr, configs.len() as u32, configs.as_ptr(), rundown as BOOL, &mut session)
        })?;
        Ok(session)
    }

    /// The name of an EventPipe provider from the handle `EventPipeEventDelivered` passes
    /// (`ICorProfilerInfo12::EventPipeGetProviderInfo`).
    pub fn event_pipe_get_provider_info(&self, provider: usize) -> HrResult<String> {
        let f = slot!(self, 105, "EventPipeGetProviderInfo", fn(usize, u32, *mut u32, *mut u16));
        // Safety: valid call; buffers sized by `read_string`.
        read_string(|cch, pcch, buf| unsafe { f(self.ptr, provider, cch, pcch, buf) }, "EventPipeGetProviderInfo")
    }

    /// A method's body as the runtime has it (header, code and sections; `GetILFunctionBody`):
    /// `None` for methods without IL. The bytes stay valid while the module is loaded.
    pub fn get_il_function_body(&self, module: ModuleID, token: mdMethodDef) -> HrResult<Option<&'static [u8]>> {
        let f = slot!(self, 22, "GetILFunctionBody", fn(ModuleID, mdMethodDef, *mut *const u8, *mut u32));
        let mut header: *const u8 = std::ptr::null();
        let mut size = 0u32;
        // Safety: valid call with writable out-params.
        check("GetILFunctionBody", unsafe { f(self.ptr, module, token, &mut header, &mut size) })?;
        if header.is_null() || size == 0 {
            return Ok(None);
        }
        // Safety: the runtime returns `size` readable bytes at `header`, mapped for the module's
        // lifetime (its image, or a body a profiler set, which is never freed).
        Ok(Some(unsafe { std::slice::from_raw_parts(header, size as usize) }))
    }

    /// Replaces a method's body before its first compilation (`SetILFunctionBody`) with `body`,
    /// copied into memory from the module's `IMethodMalloc` (`GetILFunctionBodyAllocator`), which
    /// the runtime owns from then on.
    pub fn set_il_function_body(&self, module: ModuleID, token: mdMethodDef, body: &[u8]) -> HrResult<()> {
        let get_alloc = slot!(self, 23, "GetILFunctionBodyAllocator", fn(ModuleID, *mut *mut c_void));
        let set = slot!(self, 24, "SetILFunctionBody", fn(ModuleID, mdMethodDef, *const u8));
        let mut malloc: *mut c_void = std::ptr::null_mut();
        // Safety: valid call with a writable out-param.
        check("GetILFunctionBodyAllocator", unsafe { get_alloc(self.ptr, module, &mut malloc) })?;
        if malloc.is_null() {
            return Err(HrError { method: "GetILFunctionBodyAllocator", hr: E_FAIL });
        }
        // Safety: `malloc` is an AddRef'd IMethodMalloc: IUnknown, then `PVOID Alloc(ULONG cb)` at
        // slot 3 (corprof.idl); Release at slot 2.
        let mem = unsafe {
            let vt = *(malloc as *const *const usize);
            let alloc: unsafe extern "system" fn(*mut c_void, u32) -> *mut u8 = transmute(*vt.add(3));
            let release: unsafe extern "system" fn(*mut c_void) -> u32 = transmute(*vt.add(2));
            let mem = alloc(malloc, body.len() as u32);
            release(malloc);
            mem
        };
        if mem.is_null() {
            return Err(HrError { method: "IMethodMalloc::Alloc", hr: E_OUTOFMEMORY });
        }
        // Safety: `mem` holds `body.len()` writable bytes the allocator just gave.
        unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), mem, body.len()) };
        // Safety: valid call; the body lives in runtime-owned memory from now on.
        check("SetILFunctionBody", unsafe { set(self.ptr, module, token, mem) })
    }

    /// The module's metadata opened for writing (`GetModuleMetaData(ofWrite, IID_IMetaDataEmit)`),
    /// `None` for modules without metadata.
    pub fn get_module_metadata_emit(&self, id: ModuleID) -> HrResult<Option<crate::metadata::MetaDataEmit>> {
        let f = slot!(self, 21, "GetModuleMetaData", fn(ModuleID, u32, *const GUID, *mut *mut c_void));
        let mut out: *mut c_void = std::ptr::null_mut();
        // Safety: valid call with a writable out-param.
        check("GetModuleMetaData", unsafe { f(self.ptr, id, OF_WRITE, &IID_IMETADATAEMIT, &mut out) })?;
        if out.is_null() {
            return Ok(None);
        }
        // Safety: `out` is an AddRef'd IMetaDataEmit pointer whose ownership we take.
        Ok(Some(unsafe { crate::metadata::MetaDataEmit::from_raw(out) }))
    }

    /// Size in bytes of a method's IL code (`ICorProfilerInfo::GetILFunctionBody`, header parsed:
    /// tiny headers hold the size in their first byte, fat headers at offset 4). `None` for methods
    /// without IL (abstract, runtime-implemented, dynamic).
    pub fn il_code_size(&self, module: ModuleID, token: mdMethodDef) -> HrResult<Option<u32>> {
        let Some(body) = self.get_il_function_body(module, token)? else { return Ok(None) };
        Ok(match body[0] & 0x3 {
            0x2 => Some((body[0] >> 2) as u32),
            0x3 if body.len() >= 8 => Some(u32::from_le_bytes([body[4], body[5], body[6], body[7]])),
            _ => None,
        })
    }
}

/// `COR_PRF_REJIT_FLAGS` (`RequestReJITWithInliners`).
pub mod rejit_flags {
    /// Rejitted methods are not inlined (mandatory).
    pub const BLOCK_INLINING: u32 = 0x1;
    /// `GetReJITParameters` for the inliners too (without it they are recompiled from their IL).
    pub const INLINING_CALLBACKS: u32 = 0x2;
}

/// ReJIT (`attach --count`): new IL for methods that may already run, and metadata made after attach.
impl ProfilerInfo {
    /// Asks for new code of these method definitions (`ICorProfilerInfo4::RequestReJIT`); the IL
    /// comes from `GetReJITParameters`. Inliners are not recompiled.
    pub fn request_rejit(&self, modules: &[ModuleID], methods: &[mdMethodDef]) -> HrResult<()> {
        let f = slot!(self, 73, "RequestReJIT", fn(u32, *const ModuleID, *const mdMethodDef));
        let n = modules.len().min(methods.len()) as u32;
        // Safety: valid call; both arrays hold `n` elements and outlive the call.
        check("RequestReJIT", unsafe { f(self.ptr, n, modules.as_ptr(), methods.as_ptr()) })
    }

    /// As [`request_rejit`](Self::request_rejit), and every method that inlined one of them is
    /// recompiled too (`ICorProfilerInfo10::RequestReJITWithInliners`; `flags` from [`rejit_flags`]).
    pub fn request_rejit_with_inliners(
        &self,
        flags: u32,
        modules: &[ModuleID],
        methods: &[mdMethodDef],
    ) -> HrResult<()> {
        let f = slot!(self, 96, "RequestReJITWithInliners", fn(u32, u32, *const ModuleID, *const mdMethodDef));
        let n = modules.len().min(methods.len()) as u32;
        // Safety: valid call; both arrays hold `n` elements and outlive the call.
        check("RequestReJITWithInliners", unsafe { f(self.ptr, flags, n, modules.as_ptr(), methods.as_ptr()) })
    }

    /// Makes metadata defined after attach usable (`ICorProfilerInfo7::ApplyMetaData`).
    pub fn apply_metadata(&self, module: ModuleID) -> HrResult<()> {
        let f = slot!(self, 84, "ApplyMetaData", fn(ModuleID));
        // Safety: valid call.
        check("ApplyMetaData", unsafe { f(self.ptr, module) })
    }
}

/// The `ICorProfilerFunctionControl` that `GetReJITParameters` passes, valid during that call.
#[derive(Clone, Copy, Debug)]
pub struct FunctionControl(*const c_void);

impl FunctionControl {
    /// # Safety
    /// `ptr` is the `pFunctionControl` of the running `GetReJITParameters` call, used only during it.
    pub unsafe fn from_raw(ptr: *const c_void) -> Option<FunctionControl> {
        (!ptr.is_null()).then_some(FunctionControl(ptr))
    }

    /// The method's new body (header, code, sections); the runtime copies it
    /// (`ICorProfilerFunctionControl::SetILFunctionBody`, slot 4 after IUnknown and SetCodegenFlags).
    pub fn set_il_function_body(&self, body: &[u8]) -> HrResult<()> {
        // Safety: a live ICorProfilerFunctionControl (from_raw's contract); slot 4 is
        // `SetILFunctionBody(ULONG cbNewILMethodHeader, LPCBYTE pbNewILMethodHeader)` (corprof.idl).
        let hr = unsafe {
            let vt = *(self.0 as *const *const usize);
            let f: unsafe extern "system" fn(*const c_void, u32, *const u8) -> HRESULT = transmute(*vt.add(4));
            f(self.0, body.len() as u32, body.as_ptr())
        };
        check("ICorProfilerFunctionControl::SetILFunctionBody", hr)
    }
}

/// Reads every element of a profiling-API enumerator (`Next` at slot 7) and releases it.
///
/// # Safety
/// `e` is null or a live enumerator whose `Next(ULONG, T*, ULONG*)` fills elements of type `T`.
unsafe fn drain_enum<T: Copy + Default>(e: *mut c_void) -> Vec<T> {
    if e.is_null() {
        return Vec::new();
    }
    // Safety: per the contract above.
    unsafe {
        let vt = *(e as *const *const usize);
        let next: unsafe extern "system" fn(*mut c_void, u32, *mut T, *mut u32) -> HRESULT = transmute(*vt.add(7));
        let release: unsafe extern "system" fn(*mut c_void) -> u32 = transmute(*vt.add(2));
        let mut out = Vec::new();
        let mut buf = [T::default(); 64];
        loop {
            let mut got = 0u32;
            let hr = next(e, buf.len() as u32, buf.as_mut_ptr(), &mut got);
            out.extend_from_slice(&buf[..(got as usize).min(buf.len())]);
            if hr != S_OK || got == 0 {
                break;
            }
        }
        release(e);
        out
    }
}
