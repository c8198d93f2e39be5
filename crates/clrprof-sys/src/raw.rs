//! What the runtime hands over, read safely: a failed call's HRESULT as an [`HrError`], UTF-16
//! strings, and runtime-owned arrays and module images viewed as slices. The interface wrappers
//! (`info.rs`, `metadata.rs`) both build on it.

use crate::types::HRESULT;

/// A failed call: the method's name and its HRESULT (or `E_NOTIMPL` when the runtime's
/// interface version lacks the method).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HrError {
    pub method: &'static str,
    pub hr: HRESULT,
}

impl std::fmt::Display for HrError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} failed with HRESULT 0x{:08X}", self.method, self.hr as u32)
    }
}

impl std::error::Error for HrError {}

pub type HrResult<T> = Result<T, HrError>;

/// `Ok` for a success HRESULT, else the method's [`HrError`].
pub(crate) fn check(method: &'static str, hr: HRESULT) -> HrResult<()> {
    if hr >= 0 {
        Ok(())
    } else {
        Err(HrError { method, hr })
    }
}

/// Converts a runtime UTF-16 buffer whose reported length may include the terminating NUL.
pub fn utf16_to_string(buf: &[u16]) -> String {
    let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
    String::from_utf16_lossy(&buf[..end])
}

/// UTF-16, NUL-terminated, for passing strings to the runtime.
pub fn to_utf16z(s: &str) -> Vec<u16> {
    s.encode_utf16().chain(std::iter::once(0)).collect()
}

/// Reads a runtime-owned UTF-16 string of `len` units.
///
/// # Safety
/// `ptr` must point to `len` readable `u16`s (or be null, giving an empty string).
pub unsafe fn utf16_from_raw(ptr: *const u16, len: usize) -> String {
    if ptr.is_null() || len == 0 {
        return String::new();
    }
    // Safety: guaranteed by the caller.
    utf16_to_string(unsafe { std::slice::from_raw_parts(ptr, len) })
}

/// Views a runtime-owned array as a slice for the duration of a callback.
///
/// # Safety
/// `ptr` must point to `len` valid `T`s that outlive the returned slice (or be null).
pub unsafe fn slice_from_raw<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if ptr.is_null() || len == 0 {
        return &[];
    }
    // Safety: guaranteed by the caller.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

/// `len` bytes at `offset` into a module image the runtime loaded at `base`, for reading its
/// headers and metadata in place; `None` for a null base or a range past 1 GiB.
///
/// # Safety
/// `base` must be the load address `GetModuleInfo2` gave for a module that stays loaded while
/// the bytes are used (not collectible), and `offset`/`len` a range its own headers place in the
/// image (PE headers, section table, CLI header, metadata): the runtime checked those headers
/// and mapped those ranges readable when it loaded the module.
pub unsafe fn module_image_bytes(base: usize, offset: usize, len: usize) -> Option<&'static [u8]> {
    const LIMIT: usize = 1 << 30;
    if base == 0 || offset.checked_add(len)? > LIMIT {
        return None;
    }
    // Safety: guaranteed by the caller.
    Some(unsafe { slice_from_raw((base + offset) as *const u8, len) })
}
