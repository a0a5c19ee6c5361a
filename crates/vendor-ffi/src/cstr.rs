//! Strings C wrote into fixed buffers.

/// The text of a NUL-terminated C string in `buf` (all of `buf` when it holds no NUL),
/// invalid UTF-8 replaced, surrounding whitespace trimmed.
pub(crate) fn from_c_buf(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stops_at_the_first_nul_and_survives_a_missing_one() {
        assert_eq!(from_c_buf(b"MI300X\0garbage"), "MI300X");
        assert_eq!(from_c_buf(b"  no-nul "), "no-nul");
        assert_eq!(from_c_buf(b"\0"), "");
        assert_eq!(from_c_buf(b"\xffA\0"), "\u{fffd}A");
    }
}
