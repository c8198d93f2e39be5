//! Basic ABI types of the Profiling API on LP64 Linux (see `pal_mstypes.h`).

/// `HRESULT`.
pub type HRESULT = i32;
/// `BOOL` (4 bytes).
pub type BOOL = i32;
/// `ULONG`/`DWORD`: 4 bytes on LP64 PAL.
pub type ULONG = u32;
/// `WCHAR`: UTF-16 code unit.
pub type WCHAR = u16;
pub type FunctionID = usize;
pub type ClassID = usize;
pub type ModuleID = usize;
pub type AssemblyID = usize;
pub type AppDomainID = usize;
pub type ThreadID = usize;
pub type ObjectID = usize;
pub type ReJITID = usize;
pub type GCHandleID = usize;
pub type mdToken = u32;
pub type mdTypeDef = u32;
pub type mdMethodDef = u32;

pub const TRUE: BOOL = 1;
pub const FALSE: BOOL = 0;

/// A COM GUID, laid out as in C (and as .NET `Guid.ToByteArray()`).
#[repr(C)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GUID {
    pub data1: u32,
    pub data2: u16,
    pub data3: u16,
    pub data4: [u8; 8],
}

impl GUID {
    /// Builds a GUID from its canonical parts, `{data1-data2-data3-d4[0..2]-d4[2..8]}`.
    pub const fn new(data1: u32, data2: u16, data3: u16, d4: u16, d5: u64) -> GUID {
        GUID {
            data1,
            data2,
            data3,
            data4: [
                (d4 >> 8) as u8,
                d4 as u8,
                (d5 >> 40) as u8,
                (d5 >> 32) as u8,
                (d5 >> 24) as u8,
                (d5 >> 16) as u8,
                (d5 >> 8) as u8,
                d5 as u8,
            ],
        }
    }

    /// Parses `{XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX}` (braces optional).
    pub fn parse(s: &str) -> Option<GUID> {
        let s = s.trim();
        let s = s.strip_prefix('{').and_then(|s| s.strip_suffix('}')).unwrap_or(s);
        let parts: Vec<&str> = s.split('-').collect();
        let lens = [8, 4, 4, 4, 12];
        if parts.len() != 5 || parts.iter().zip(lens).any(|(p, l)| p.len() != l) {
            return None;
        }
        if !parts.iter().all(|p| p.bytes().all(|b| b.is_ascii_hexdigit())) {
            return None;
        }
        Some(GUID::new(
            u32::from_str_radix(parts[0], 16).ok()?,
            u16::from_str_radix(parts[1], 16).ok()?,
            u16::from_str_radix(parts[2], 16).ok()?,
            u16::from_str_radix(parts[3], 16).ok()?,
            u64::from_str_radix(parts[4], 16).ok()?,
        ))
    }

    /// The 16 bytes of the GUID in memory order (as `Guid.ToByteArray()`).
    pub fn to_bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&self.data1.to_le_bytes());
        b[4..6].copy_from_slice(&self.data2.to_le_bytes());
        b[6..8].copy_from_slice(&self.data3.to_le_bytes());
        b[8..16].copy_from_slice(&self.data4);
        b
    }
}

impl std::fmt::Debug for GUID {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Display for GUID {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let d = &self.data4;
        write!(
            f,
            "{{{:08X}-{:04X}-{:04X}-{:02X}{:02X}-{:02X}{:02X}{:02X}{:02X}{:02X}{:02X}}}",
            self.data1, self.data2, self.data3, d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]
        )
    }
}

/// `COR_PRF_CODE_INFO`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct CodeInfo {
    pub start_address: usize,
    pub size: usize,
}

/// `COR_PRF_GC_GENERATION_RANGE`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct GenerationRange {
    /// `COR_PRF_GC_GENERATION`: 0, 1, 2, 3 = LOH, 4 = POH.
    pub generation: u32,
    pub range_start: usize,
    pub range_length: usize,
    pub range_length_reserved: usize,
}

/// `COR_PRF_EVENTPIPE_PROVIDER_CONFIG`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EventPipeProviderConfig {
    pub provider_name: *const u16,
    pub keywords: u64,
    pub logging_level: u32,
    /// `key=value;...` or null.
    pub filter_data: *const u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_round_trips_through_text_and_bytes() {
        let g = GUID::parse("{8A8CC829-CCF2-49FE-BBAE-0F022228071A}").unwrap();
        assert_eq!(g.data1, 0x8A8CC829);
        assert_eq!(g.data2, 0xCCF2);
        assert_eq!(g.data3, 0x49FE);
        assert_eq!(g.data4, [0xBB, 0xAE, 0x0F, 0x02, 0x22, 0x28, 0x07, 0x1A]);
        assert_eq!(g.to_string(), "{8A8CC829-CCF2-49FE-BBAE-0F022228071A}");
        assert_eq!(GUID::parse("8a8cc829-ccf2-49fe-bbae-0f022228071a"), Some(g));
        assert_eq!(&g.to_bytes()[..4], &[0x29, 0xC8, 0x8C, 0x8A]);
        assert_eq!(GUID::parse("{8A8CC829-CCF2-49FE-BBAE-0F022228071}"), None);
        assert_eq!(GUID::parse("not a guid"), None);
        assert_eq!(GUID::parse("{8A8CC829-CCF2-49FE-BBAE-0F022228071G}"), None);
    }
}
