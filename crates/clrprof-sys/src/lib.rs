//! Raw FFI of the CLR Profiling API on Linux x86_64: GUIDs, HRESULTs, event-mask flags, the
//! `ICorProfilerCallback11` vtable (with panic-catching shims over a safe trait), and thin,
//! checked wrappers over `ICorProfilerInfo1..15` and `IMetaDataImport(2)`.
//!
//! This is the crate where `unsafe` lives; every block says why it is sound.
#![allow(non_camel_case_types, clippy::upper_case_acronyms)]

pub mod callback;
pub mod consts;
pub mod info;
pub mod metadata;
pub mod raw;
pub mod types;

pub use callback::{CallbackError, CallbackResult, ClassFactory, ComObject, OutBool, ProfilerCallback, RawPtr};
pub use consts::*;
pub use info::{ProfilerInfo, RuntimeInfo};
pub use metadata::{MetaDataImport, MethodProps};
pub use raw::{HrError, HrResult};
pub use types::*;
