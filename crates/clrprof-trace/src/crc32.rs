//! CRC-32 (IEEE 802.3, reflected, as in zlib) of a block's payload: `crc32fast`, which uses the
//! CPU's carry-less multiply when it has one (the writer thread checksums every block it writes).

pub fn crc32(data: &[u8]) -> u32 {
    crc32fast::hash(data)
}

#[cfg(test)]
mod tests {
    #[test]
    fn known_vector() {
        assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
        assert_eq!(super::crc32(b""), 0);
    }
}
