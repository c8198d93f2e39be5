//! Field encoding: little-endian integers, strings as `u32` length + UTF-8, vectors as `u32`
//! count + elements. A record body is its fields in order. Fields are only ever appended at the
//! end of a body, so decoders ignore bytes after the fields they know (written by a newer
//! version) and give fields missing at the end their `Default` (written by an older version).

use crate::DecodeError;

/// Reads fields from one record body.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() - self.pos < n {
            return Err(DecodeError::Corrupt(format!(
                "record field needs {n} bytes but only {} remain",
                self.buf.len() - self.pos
            )));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next field, or its `Default` when the body ends exactly here (a field appended after
    /// the body was written). A field cut in the middle stays an error.
    pub fn trailing<T: Field + Default>(&mut self) -> Result<T, DecodeError> {
        if self.remaining() == 0 {
            Ok(T::default())
        } else {
            T::get(self)
        }
    }
}

/// A value that can be a record field.
pub trait Field: Sized {
    fn put(&self, out: &mut Vec<u8>);
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// `n` values one after the other, as [`get`](Self::get) reads them one at a time (integers
    /// read them at once: a call-tree record holds tens of thousands).
    fn get_many(r: &mut Reader<'_>, n: usize) -> Result<Vec<Self>, DecodeError> {
        get_one_by_one(r, n)
    }
}

/// `n` values of `T`, each read by [`Field::get`].
fn get_one_by_one<T: Field>(r: &mut Reader<'_>, n: usize) -> Result<Vec<T>, DecodeError> {
    // Grow as elements really decode: a damaged count never reserves more than the body holds.
    let mut v = Vec::with_capacity(n.min(r.remaining() / std::mem::size_of::<T>().max(1)).min(1 << 16));
    for _ in 0..n {
        v.push(T::get(r)?);
    }
    Ok(v)
}

macro_rules! int_field {
    ($($t:ty),*) => {$(
        impl Field for $t {
            fn put(&self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
                let b = r.take(std::mem::size_of::<$t>())?;
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(b);
                Ok(<$t>::from_le_bytes(a))
            }
            fn get_many(r: &mut Reader<'_>, n: usize) -> Result<Vec<Self>, DecodeError> {
                const SIZE: usize = std::mem::size_of::<$t>();
                match n.checked_mul(SIZE) {
                    Some(len) if len <= r.remaining() => {
                        let b = r.take(len)?;
                        Ok(b.chunks_exact(SIZE).map(|c| <$t>::from_le_bytes(c.try_into().expect("SIZE bytes"))).collect())
                    }
                    // Cut short: read one at a time, to the same error.
                    _ => get_one_by_one(r, n),
                }
            }
        }
    )*};
}
int_field!(u8, u16, u32, u64, i32, i64, f64);

impl Field for bool {
    fn put(&self, out: &mut Vec<u8>) {
        out.push(*self as u8);
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(u8::get(r)? != 0)
    }
}

impl Field for String {
    fn put(&self, out: &mut Vec<u8>) {
        (self.len() as u32).put(out);
        out.extend_from_slice(self.as_bytes());
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = u32::get(r)? as usize;
        let b = r.take(n)?;
        Ok(String::from_utf8_lossy(b).into_owned())
    }
}

impl<T: Field> Field for Vec<T> {
    fn put(&self, out: &mut Vec<u8>) {
        (self.len() as u32).put(out);
        for v in self {
            v.put(out);
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let n = u32::get(r)? as usize;
        // Each element takes at least one byte: a count beyond the remaining bytes is corrupt.
        if n > r.remaining() {
            return Err(DecodeError::Corrupt(format!("vector of {n} elements in {} bytes", r.remaining())));
        }
        T::get_many(r, n)
    }
}

impl<T: Field> Field for Option<T> {
    fn put(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                v.put(out);
            }
        }
    }
    fn get(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        match u8::get(r)? {
            0 => Ok(None),
            1 => Ok(Some(T::get(r)?)),
            t => Err(DecodeError::Corrupt(format!("bad option tag {t}"))),
        }
    }
}

/// A value of each field type that differs from its `Default`, for tests of every record type.
#[cfg(test)]
pub(crate) trait NonDefault {
    fn non_default() -> Self;
}

#[cfg(test)]
mod non_default {
    use super::NonDefault;

    macro_rules! non_default {
        ($($t:ty = $v:expr),* $(,)?) => {$(
            impl NonDefault for $t {
                fn non_default() -> Self {
                    $v
                }
            }
        )*};
    }
    non_default!(
        u8 = 0xa5,
        u16 = 0xa55a,
        u32 = 0xdead_beef,
        u64 = 0x0123_4567_89ab_cdef,
        i32 = -7,
        i64 = -1 << 40,
        f64 = 2.5,
        bool = true,
        String = "caf\u{e9} \u{1F600}".to_string(),
    );

    impl<T: NonDefault> NonDefault for Vec<T> {
        fn non_default() -> Self {
            vec![T::non_default(), T::non_default()]
        }
    }

    impl<T: NonDefault> NonDefault for Option<T> {
        fn non_default() -> Self {
            Some(T::non_default())
        }
    }
}
