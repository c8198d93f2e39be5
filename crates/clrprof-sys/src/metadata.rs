//! Safe wrappers over the subsets of `IMetaDataImport`/`IMetaDataImport2` used to name things and of
//! `IMetaDataEmit`/`IMetaDataAssemblyEmit` that count probes need.

use std::ffi::c_void;
use std::mem::transmute;

use crate::raw::{check, slice_from_raw, utf16_to_string, HrResult};
use crate::types::*;

/// An owned `IMetaDataImport` (released on drop). `v2` tells whether it is an `IMetaDataImport2`.
pub struct MetaDataImport {
    ptr: *mut c_void,
    v2: bool,
}

// Safety: the runtime's metadata importers (RegMeta) are internally synchronised for reads.
unsafe impl Send for MetaDataImport {}
// Safety: as above.
unsafe impl Sync for MetaDataImport {}

impl Drop for MetaDataImport {
    fn drop(&mut self) {
        // Safety: we own one reference; slot 2 is Release.
        unsafe {
            let release: unsafe extern "system" fn(*mut c_void) -> u32 = transmute(self.slot(2));
            release(self.ptr);
        }
    }
}

/// Properties of a method definition.
#[derive(Clone, Debug)]
pub struct MethodProps {
    pub class: mdTypeDef,
    pub name: String,
    pub attributes: u32,
    pub signature: Vec<u8>,
}

macro_rules! mdslot {
    ($self:ident, $idx:expr, fn($($t:ty),* $(,)?)) => {{
        // Safety: slot $idx of IMetaDataImport has this signature in cor.h.
        let f: unsafe extern "system" fn(*mut c_void $(, $t)*) -> HRESULT = unsafe { transmute($self.slot($idx)) };
        f
    }};
}

impl MetaDataImport {
    /// # Safety
    /// `ptr` must be an AddRef'd `IMetaDataImport` (or `IMetaDataImport2` when `v2`).
    pub unsafe fn from_raw(ptr: *mut c_void, v2: bool) -> MetaDataImport {
        MetaDataImport { ptr, v2 }
    }

    fn slot(&self, idx: usize) -> usize {
        // Safety: `ptr` is a live COM object; callers pass indexes inside the interface they hold.
        unsafe { *(*(self.ptr as *const *const usize)).add(idx) }
    }

    fn name_call(
        &self,
        method: &'static str,
        mut call: impl FnMut(*mut u16, u32, *mut u32) -> HRESULT,
    ) -> HrResult<String> {
        let mut buf = vec![0u16; 512];
        let mut n = 0u32;
        check(method, call(buf.as_mut_ptr(), buf.len() as u32, &mut n))?;
        if n as usize > buf.len() {
            buf = vec![0u16; n as usize];
            check(method, call(buf.as_mut_ptr(), buf.len() as u32, &mut n))?;
        }
        Ok(utf16_to_string(&buf[..(n as usize).min(buf.len())]))
    }

    /// (`Namespace.Name` with arity suffix, flags, extends token).
    pub fn get_type_def_props(&self, td: mdTypeDef) -> HrResult<(String, u32, mdToken)> {
        let f = mdslot!(self, 12, fn(mdTypeDef, *mut u16, u32, *mut u32, *mut u32, *mut mdToken));
        let (mut flags, mut ext) = (0u32, 0u32);
        // Safety: valid call; buffer sized by `name_call`.
        let name =
            self.name_call("GetTypeDefProps", |b, c, n| unsafe { f(self.ptr, td, b, c, n, &mut flags, &mut ext) })?;
        Ok((name, flags, ext))
    }

    /// (`Namespace.Name`, resolution scope).
    pub fn get_type_ref_props(&self, tr: mdToken) -> HrResult<(String, mdToken)> {
        let f = mdslot!(self, 14, fn(mdToken, *mut mdToken, *mut u16, u32, *mut u32));
        let mut scope = 0u32;
        // Safety: valid call; buffer sized by `name_call`.
        let name = self.name_call("GetTypeRefProps", |b, c, n| unsafe { f(self.ptr, tr, &mut scope, b, c, n) })?;
        Ok((name, scope))
    }

    pub fn get_method_props(&self, mb: mdMethodDef) -> HrResult<MethodProps> {
        let f = mdslot!(
            self,
            30,
            fn(
                mdMethodDef,
                *mut mdTypeDef,
                *mut u16,
                u32,
                *mut u32,
                *mut u32,
                *mut *const u8,
                *mut u32,
                *mut u32,
                *mut u32,
            )
        );
        let (mut class, mut attr, mut sig, mut sig_len, mut rva, mut impl_flags) =
            (0u32, 0u32, std::ptr::null::<u8>(), 0u32, 0u32, 0u32);
        let name = self.name_call("GetMethodProps", |b, c, n| {
            // Safety: valid call; buffer sized by `name_call`.
            unsafe {
                f(self.ptr, mb, &mut class, b, c, n, &mut attr, &mut sig, &mut sig_len, &mut rva, &mut impl_flags)
            }
        })?;
        // Safety: the signature blob lives as long as the importer; we copy it out.
        let signature = unsafe { slice_from_raw(sig, sig_len as usize) }.to_vec();
        Ok(MethodProps { class, name, attributes: attr, signature })
    }

    /// The enclosing type of a nested type, or `None` when `td` is not nested.
    pub fn get_nested_class_props(&self, td: mdTypeDef) -> Option<mdTypeDef> {
        let f = mdslot!(self, 62, fn(mdTypeDef, *mut mdTypeDef));
        let mut enclosing = 0u32;
        // Safety: valid call with writable out-param.
        let hr = unsafe { f(self.ptr, td, &mut enclosing) };
        (hr >= 0 && enclosing != 0).then_some(enclosing)
    }

    /// The signature blob of a TypeSpec token.
    pub fn get_type_spec_from_token(&self, ts: mdToken) -> HrResult<Vec<u8>> {
        let f = mdslot!(self, 44, fn(mdToken, *mut *const u8, *mut u32));
        let (mut sig, mut len) = (std::ptr::null::<u8>(), 0u32);
        // Safety: valid call with writable out-params.
        check("GetTypeSpecFromToken", unsafe { f(self.ptr, ts, &mut sig, &mut len) })?;
        // Safety: the blob lives as long as the importer; we copy it out.
        Ok(unsafe { slice_from_raw(sig, len as usize) }.to_vec())
    }

    /// Names of the generic parameters of a type or method definition, in order
    /// (`IMetaDataImport2`; empty when unavailable).
    pub fn generic_param_names(&self, owner: mdToken) -> Vec<String> {
        if !self.v2 {
            return Vec::new();
        }
        let enum_params = mdslot!(self, 65, fn(*mut usize, mdToken, *mut u32, u32, *mut u32));
        let props = mdslot!(self, 66, fn(u32, *mut u32, *mut u32, *mut mdToken, *mut u32, *mut u16, u32, *mut u32));
        // Safety: slot 3 of IMetaDataImport is `void CloseEnum(HCORENUM)`.
        let close: unsafe extern "system" fn(*mut c_void, usize) = unsafe { transmute(self.slot(3)) };
        let mut henum = 0usize;
        let mut tokens = [0u32; 32];
        let mut n = 0u32;
        // Safety: valid call; the array holds 32 entries as announced.
        let hr = unsafe { enum_params(self.ptr, &mut henum, owner, tokens.as_mut_ptr(), tokens.len() as u32, &mut n) };
        let mut names = Vec::new();
        if hr >= 0 {
            for &gp in &tokens[..(n as usize).min(tokens.len())] {
                let (mut seq, mut flags, mut own, mut reserved) = (0u32, 0u32, 0u32, 0u32);
                let name = self.name_call("GetGenericParamProps", |b, c, len| {
                    // Safety: valid call; buffer sized by `name_call`.
                    unsafe { props(self.ptr, gp, &mut seq, &mut flags, &mut own, &mut reserved, b, c, len) }
                });
                names.push(name.unwrap_or_else(|_| format!("T{}", names.len())));
            }
        }
        if henum != 0 {
            // Safety: closes the enumerator opened above.
            unsafe { close(self.ptr, henum) };
        }
        names
    }
}

/// An owned `IMetaDataEmit` (released on drop): the few definitions a count probe needs.
pub struct MetaDataEmit {
    ptr: *mut c_void,
}

// Safety: the runtime's metadata emitters (RegMeta) take their own write lock per call.
unsafe impl Send for MetaDataEmit {}
// Safety: as above.
unsafe impl Sync for MetaDataEmit {}

impl Drop for MetaDataEmit {
    fn drop(&mut self) {
        // Safety: we own one reference; slot 2 is Release.
        unsafe { release(self.ptr) };
    }
}

/// Releases one reference of a COM object.
///
/// # Safety
/// `ptr` is a live COM object the caller owns a reference of.
unsafe fn release(ptr: *mut c_void) {
    // Safety: per the contract; slot 2 of every COM interface is Release.
    unsafe {
        let f: unsafe extern "system" fn(*mut c_void) -> u32 = transmute(*(*(ptr as *const *const usize)).add(2));
        f(ptr);
    }
}

/// `ASSEMBLYMETADATA` (cor.h), all empty but the version.
#[repr(C)]
struct AssemblyMetadata {
    version: [u16; 4],
    locale: *const u16,
    locale_len: u32,
    processor: *const u32,
    processor_len: u32,
    os: *const c_void,
    os_len: u32,
}

impl MetaDataEmit {
    /// # Safety
    /// `ptr` must be an AddRef'd `IMetaDataEmit`.
    pub unsafe fn from_raw(ptr: *mut c_void) -> MetaDataEmit {
        MetaDataEmit { ptr }
    }

    fn slot(&self, idx: usize) -> usize {
        // Safety: `ptr` is a live COM object; callers pass indexes inside IMetaDataEmit.
        unsafe { *(*(self.ptr as *const *const usize)).add(idx) }
    }

    /// `DefineTypeRefByName(scope, "Namespace.Name")` (slot 12).
    pub fn define_type_ref_by_name(&self, scope: mdToken, name: &str) -> HrResult<mdToken> {
        let f = mdslot!(self, 12, fn(mdToken, *const u16, *mut mdToken));
        let name = crate::raw::to_utf16z(name);
        let mut out = 0u32;
        // Safety: valid call; the name is NUL-terminated and outlives it.
        check("DefineTypeRefByName", unsafe { f(self.ptr, scope, name.as_ptr(), &mut out) })?;
        Ok(out)
    }

    /// `DefineMemberRef(parent, name, signature)` (slot 14).
    pub fn define_member_ref(&self, parent: mdToken, name: &str, sig: &[u8]) -> HrResult<mdToken> {
        let f = mdslot!(self, 14, fn(mdToken, *const u16, *const u8, u32, *mut mdToken));
        let name = crate::raw::to_utf16z(name);
        let mut out = 0u32;
        // Safety: valid call; name and signature outlive it.
        check("DefineMemberRef", unsafe {
            f(self.ptr, parent, name.as_ptr(), sig.as_ptr(), sig.len() as u32, &mut out)
        })?;
        Ok(out)
    }

    /// A new AssemblyRef (`IMetaDataAssemblyEmit::DefineAssemblyRef`, slot 4, through a QI of this
    /// emitter) to `name` at `version`, with the public key token `token`.
    pub fn define_assembly_ref(&self, name: &str, version: [u16; 4], token: &[u8]) -> HrResult<mdToken> {
        let qi: unsafe extern "system" fn(*mut c_void, *const GUID, *mut *mut c_void) -> HRESULT =
            // Safety: slot 0 of every COM interface is QueryInterface.
            unsafe { transmute(self.slot(0)) };
        let mut asm: *mut c_void = std::ptr::null_mut();
        // Safety: valid call with a writable out-param.
        check("QueryInterface(IMetaDataAssemblyEmit)", unsafe {
            qi(self.ptr, &crate::consts::IID_IMETADATAASSEMBLYEMIT, &mut asm)
        })?;
        if asm.is_null() {
            return Err(crate::raw::HrError {
                method: "QueryInterface(IMetaDataAssemblyEmit)",
                hr: crate::consts::E_NOINTERFACE,
            });
        }
        type Define = unsafe extern "system" fn(
            *mut c_void,
            *const u8,
            u32,
            *const u16,
            *const AssemblyMetadata,
            *const u8,
            u32,
            u32,
            *mut mdToken,
        ) -> HRESULT;
        let name = crate::raw::to_utf16z(name);
        let md = AssemblyMetadata {
            version,
            locale: std::ptr::null(),
            locale_len: 0,
            processor: std::ptr::null(),
            processor_len: 0,
            os: std::ptr::null(),
            os_len: 0,
        };
        let mut out = 0u32;
        // Safety: `asm` is an AddRef'd IMetaDataAssemblyEmit whose slot 4 is DefineAssemblyRef
        // (cor.h); every pointer outlives the call; then our reference is released.
        let hr = unsafe {
            let f: Define = transmute(*(*(asm as *const *const usize)).add(4));
            let hr = f(asm, token.as_ptr(), token.len() as u32, name.as_ptr(), &md, std::ptr::null(), 0, 0, &mut out);
            release(asm);
            hr
        };
        check("DefineAssemblyRef", hr)?;
        Ok(out)
    }
}
