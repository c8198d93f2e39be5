//! HRESULTs, interface IDs and event-mask flags (values from `corprof.idl`, `corerror.xml`, `cor.h`).
#![allow(clippy::unreadable_literal)]

use crate::types::{GUID, HRESULT};

pub const S_OK: HRESULT = 0;
pub const S_FALSE: HRESULT = 1;
pub const E_NOTIMPL: HRESULT = 0x80004001_u32 as i32;
pub const E_NOINTERFACE: HRESULT = 0x80004002_u32 as i32;
pub const E_POINTER: HRESULT = 0x80004003_u32 as i32;
pub const E_FAIL: HRESULT = 0x80004005_u32 as i32;
pub const E_OUTOFMEMORY: HRESULT = 0x8007000E_u32 as i32;
pub const E_INVALIDARG: HRESULT = 0x80070057_u32 as i32;
pub const CLASS_E_NOAGGREGATION: HRESULT = 0x80040110_u32 as i32;
pub const CLASS_E_CLASSNOTAVAILABLE: HRESULT = 0x80040111_u32 as i32;
pub const CORPROF_E_FUNCTION_NOT_COMPILED: HRESULT = 0x80131350_u32 as i32;
pub const CORPROF_E_DATAINCOMPLETE: HRESULT = 0x80131351_u32 as i32;
pub const CORPROF_E_NOT_MANAGED_THREAD: HRESULT = 0x80131355_u32 as i32;
pub const CORPROF_E_STACKSNAPSHOT_UNSAFE: HRESULT = 0x80131360_u32 as i32;
pub const CORPROF_E_STACKSNAPSHOT_ABORTED: HRESULT = 0x80131361_u32 as i32;
pub const CORPROF_E_CLASSID_IS_ARRAY: HRESULT = 0x80131365_u32 as i32;
pub const CORPROF_E_CLASSID_IS_COMPOSITE: HRESULT = 0x80131366_u32 as i32;
pub const CORPROF_E_INCONSISTENT_WITH_FLAGS: HRESULT = 0x80131374_u32 as i32;
pub const CORPROF_E_PROFILER_CANCEL_ACTIVATION: HRESULT = 0x80131375_u32 as i32;
pub const CORPROF_E_SUSPENSION_IN_PROGRESS: HRESULT = 0x80131388_u32 as i32;

pub const IID_IUNKNOWN: GUID = GUID::new(0x00000000, 0x0000, 0x0000, 0xC000, 0x000000000046);
pub const IID_ICLASSFACTORY: GUID = GUID::new(0x00000001, 0x0000, 0x0000, 0xC000, 0x000000000046);

/// `IID_ICorProfilerCallback` … `IID_ICorProfilerCallback11`, index 0 = version 1.
pub const IID_ICORPROFILERCALLBACK: [GUID; 11] = [
    GUID::new(0x176FBED1, 0xA55C, 0x4796, 0x98CA, 0xA9DA0EF883E7),
    GUID::new(0x8A8CC829, 0xCCF2, 0x49FE, 0xBBAE, 0x0F022228071A),
    GUID::new(0x4FD2ED52, 0x7731, 0x4B8D, 0x9469, 0x03D2CC3086C5),
    GUID::new(0x7B63B2E3, 0x107D, 0x4D48, 0xB2F6, 0xF61E229470D2),
    GUID::new(0x8DFBA405, 0x8C9F, 0x45F8, 0xBFFA, 0x83B14CEF78B5),
    GUID::new(0xFC13DF4B, 0x4448, 0x4F4F, 0x950C, 0xBA8D19D00C36),
    GUID::new(0xF76A2DBA, 0x1D52, 0x4539, 0x866C, 0x2AA518F9EFC3),
    GUID::new(0x5BED9B15, 0xC079, 0x4D47, 0xBFE2, 0x215A140C07E0),
    GUID::new(0x27583EC3, 0xC8F5, 0x482F, 0x8052, 0x194B8CE4705A),
    GUID::new(0xCEC5B60E, 0xC69C, 0x495F, 0x87F6, 0x84D28EE16FFB),
    GUID::new(0x42350846, 0xAAED, 0x47F7, 0xB128, 0xFD0C98881CDE),
];

/// `IID_ICorProfilerInfo` … `IID_ICorProfilerInfo15`, index 0 = version 1.
pub const IID_ICORPROFILERINFO: [GUID; 15] = [
    GUID::new(0x28B5557D, 0x3F3F, 0x48B4, 0x90B2, 0x5F9EEA2F6C48),
    GUID::new(0xCC0935CD, 0xA518, 0x487D, 0xB0BB, 0xA93214E65478),
    GUID::new(0xB555ED4F, 0x452A, 0x4E54, 0x8B39, 0xB5360BAD32A0),
    GUID::new(0x0D8FDCAA, 0x6257, 0x47BF, 0xB1BF, 0x94DAC88466EE),
    GUID::new(0x07602928, 0xCE38, 0x4B83, 0x81E7, 0x74ADAF781214),
    GUID::new(0xF30A070D, 0xBFFB, 0x46A7, 0xB1D8, 0x8781EF7B698A),
    GUID::new(0x9AEECC0D, 0x63E0, 0x4187, 0x8C00, 0xE312F503F663),
    GUID::new(0xC5AC80A6, 0x782E, 0x4716, 0x8044, 0x39598C60CFBF),
    GUID::new(0x008170DB, 0xF8CC, 0x4796, 0x9A51, 0xDC8AA0B47012),
    GUID::new(0x2F1B5152, 0xC869, 0x40C9, 0xAA5F, 0x3ABE026BD720),
    GUID::new(0x06398876, 0x8987, 0x4154, 0xB621, 0x40A00D6E4D04),
    GUID::new(0x27B24CCD, 0x1CB1, 0x47C5, 0x96EE, 0x98190DC30959),
    GUID::new(0x6E6C7EE2, 0x0701, 0x4EC2, 0x9D29, 0x2E8733B66934),
    GUID::new(0xF460E352, 0xD76D, 0x4FE9, 0x835F, 0xF6AF9D6E862D),
    GUID::new(0xB446462D, 0xBD22, 0x41DD, 0x872D, 0xDC714C49EB56),
];

/// Vtable length (slots, IUnknown included) of `ICorProfilerInfoN`, index 0 = version 1.
pub const INFO_VTABLE_LEN: [usize; 15] = [36, 57, 71, 81, 83, 84, 87, 90, 93, 99, 101, 108, 111, 114, 115];

pub const IID_IMETADATAIMPORT: GUID = GUID::new(0x7DAC8207, 0xD3AE, 0x4C75, 0x9B67, 0x92801A497D44);
pub const IID_IMETADATAIMPORT2: GUID = GUID::new(0xFCE5EFA0, 0x8BBA, 0x4F8E, 0xA036, 0x8F2022B08466);
pub const IID_IMETADATAEMIT: GUID = GUID::new(0xBA3FEE4C, 0xECB9, 0x4E41, 0x83B7, 0x183FA41CD859);
pub const IID_IMETADATAASSEMBLYEMIT: GUID = GUID::new(0x211EF15B, 0x5317, 0x4438, 0xB196, 0xDEC87B887693);
/// `CorOpenFlags::ofWrite` (with `ofRead` = 0): a module's metadata opened for emitting.
pub const OF_WRITE: u32 = 0x1;

/// `COR_PRF_MONITOR` (low word of the event mask).
pub mod monitor {
    pub const FUNCTION_UNLOADS: u32 = 0x1;
    pub const CLASS_LOADS: u32 = 0x2;
    pub const MODULE_LOADS: u32 = 0x4;
    pub const ASSEMBLY_LOADS: u32 = 0x8;
    pub const APPDOMAIN_LOADS: u32 = 0x10;
    pub const JIT_COMPILATION: u32 = 0x20;
    pub const EXCEPTIONS: u32 = 0x40;
    pub const GC: u32 = 0x80;
    pub const OBJECT_ALLOCATED: u32 = 0x100;
    pub const THREADS: u32 = 0x200;
    pub const CODE_TRANSITIONS: u32 = 0x800;
    pub const ENTERLEAVE: u32 = 0x1000;
    pub const SUSPENDS: u32 = 0x10000;
    pub const CACHE_SEARCHES: u32 = 0x20000;
    pub const ENABLE_REJIT: u32 = 0x40000;
    pub const DISABLE_INLINING: u32 = 0x200000;
    pub const DISABLE_OPTIMIZATIONS: u32 = 0x400000;
    pub const ENABLE_OBJECT_ALLOCATED: u32 = 0x800000;
    pub const MONITOR_CLR_EXCEPTIONS: u32 = 0x1000000;
    pub const ENABLE_STACK_SNAPSHOT: u32 = 0x10000000;
    pub const DISABLE_ALL_NGEN_IMAGES: u32 = 0x80000000;
}

/// `COR_PRF_HIGH_MONITOR` (high word of the event mask).
pub mod high {
    pub const IN_MEMORY_SYMBOLS_UPDATED: u32 = 0x2;
    pub const MONITOR_DYNAMIC_FUNCTION_UNLOADS: u32 = 0x4;
    pub const DISABLE_TIERED_COMPILATION: u32 = 0x8;
    pub const BASIC_GC: u32 = 0x10;
    pub const MONITOR_GC_MOVED_OBJECTS: u32 = 0x20;
    pub const MONITOR_LARGEOBJECT_ALLOCATED: u32 = 0x40;
    pub const MONITOR_EVENT_PIPE: u32 = 0x80;
    pub const MONITOR_PINNEDOBJECT_ALLOCATED: u32 = 0x100;
}

/// `COR_PRF_MODULE_FLAGS` (`GetModuleInfo2`).
pub mod module_flags {
    /// Built in memory (Reflection.Emit): no image.
    pub const DYNAMIC: u32 = 0x4;
    /// Loaded in a collectible context: its image goes when the context unloads.
    pub const COLLECTIBLE: u32 = 0x8;
    /// The image is laid out as its file, not with sections at their RVAs.
    pub const FLAT_LAYOUT: u32 = 0x20;
}

/// `COR_PRF_RUNTIME_TYPE`.
pub const COR_PRF_CORE_CLR: u32 = 2;
