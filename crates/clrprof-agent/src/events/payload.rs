//! A little-endian reader over an EventPipe event payload, shared by the modules that parse the
//! runtime's, the hosting's and the heap dump's events: every read is bounds-checked and a payload
//! cut short reads as `None`, never a panic.

pub(crate) struct Payload<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Payload<'a> {
    pub(crate) fn new(b: &'a [u8]) -> Payload<'a> {
        Payload { b, at: 0 }
    }
    /// The next `n` bytes.
    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.at..self.at.checked_add(n)?)?;
        self.at += n;
        Some(s)
    }
    fn array<const N: usize>(&mut self) -> Option<[u8; N]> {
        self.take(N)?.try_into().ok()
    }
    /// Bytes left after the cursor.
    pub(crate) fn rest(&self) -> usize {
        self.b.len().saturating_sub(self.at)
    }
    pub(crate) fn u8(&mut self) -> Option<u8> {
        self.array::<1>().map(|b| b[0])
    }
    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.array().map(u16::from_le_bytes)
    }
    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.array().map(u32::from_le_bytes)
    }
    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.array().map(u64::from_le_bytes)
    }
    /// A UTF-16z string's code units as bytes (without the terminator), not decoded.
    pub(crate) fn units(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        loop {
            let c = self.take(2)?;
            if c == [0, 0] {
                return self.b.get(start..self.at - 2);
            }
        }
    }
    /// Steps over a UTF-16z string without decoding it.
    pub(crate) fn skip_utf16z(&mut self) -> Option<()> {
        self.units().map(|_| ())
    }
    pub(crate) fn utf16z(&mut self) -> Option<String> {
        Some(decode(self.units()?))
    }
}

/// UTF-16LE code units (as bytes) to a string, unpaired surrogates replaced.
pub(crate) fn decode(units: &[u8]) -> String {
    let u: Vec<u16> = units.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    String::from_utf16_lossy(&u)
}

/// `s` as a UTF-16z payload field, for tests.
#[cfg(test)]
pub(crate) fn utf16z_bytes(s: &str) -> Vec<u8> {
    s.encode_utf16().chain([0]).flat_map(|u| u.to_le_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_stop_at_the_end_of_the_payload() {
        let mut d = utf16z_bytes("héllo");
        d.extend_from_slice(&7u32.to_le_bytes());
        d.push(9);
        let mut p = Payload::new(&d);
        assert_eq!(p.utf16z().as_deref(), Some("héllo"));
        assert_eq!(p.rest(), 5);
        assert_eq!(p.u32(), Some(7));
        assert_eq!(p.u16(), None);
        assert_eq!(p.u8(), Some(9));
        assert_eq!(p.u8(), None);
        let cut = utf16z_bytes("ab");
        assert_eq!(Payload::new(&cut[..cut.len() - 1]).utf16z(), None);
    }
}
