//! The gzip (RFC 1952, <https://www.rfc-editor.org/rfc/rfc1952>) of large records: an app's
//! inventory, status and the ownership index are JSON of a few hundred bytes per object that
//! repeat their field names and values, and shrink ten to thirty times. The SQLite store keeps
//! them so ([`super::sqlite`]); the Kubernetes store so fits them under an object's size limit
//! ([`super::kubernetes`]). Pure.

use std::io::{Read, Write};

/// The gzip of `text` at `level` (`flate2`'s: 1 is the fastest, 6 its default).
pub(crate) fn compress(text: &[u8], level: u32) -> Vec<u8> {
    compress_parts(&[text], level)
}

/// The gzip of `parts` one after another (one member), at `level`, without joining them first.
pub(crate) fn compress_parts(parts: &[&[u8]], level: u32) -> Vec<u8> {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(len / 8 + 64),
        flate2::Compression::new(level),
    );
    for part in parts {
        gz.write_all(part).expect("writing to memory cannot fail");
    }
    gz.finish().expect("writing to memory cannot fail")
}

/// The UTF-8 text a gzip holds, at most `max` bytes of it; every member of a multi-member
/// gzip (RFC 1952, 2.2) in order.
///
/// # Errors
///
/// A message saying why not: not a gzip, damaged, not UTF-8, or longer than `max`.
pub(crate) fn expand(gz: &[u8], max: u64) -> Result<String, String> {
    let mut text = String::with_capacity(gz.len().saturating_mul(8).min(max as usize));
    let read = flate2::read::MultiGzDecoder::new(gz)
        .take(max + 1)
        .read_to_string(&mut text)
        .map_err(|e| format!("the gzip does not expand to UTF-8 text: {e}"))?;
    if read as u64 > max {
        return Err(format!("the gzip expands beyond {max} bytes"));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_comes_back_as_it_went_in() {
        let text = "{\"spec\":{\"entries\":[".to_string() + &"{\"a\":\"b\"},".repeat(1000) + "]}}";
        let gz = compress(text.as_bytes(), 1);
        assert!(
            gz.starts_with(&[0x1f, 0x8b, 0x08]),
            "gzip's magic bytes and deflate"
        );
        assert!(gz.len() * 10 < text.len(), "{} of {}", gz.len(), text.len());
        assert_eq!(expand(&gz, 1 << 20).unwrap(), text);
    }

    #[test]
    fn members_expand_in_order() {
        let mut gz = compress(b"{\"head\":1,", 1);
        gz.extend(compress(b"\"tail\":2}", 6));
        assert_eq!(expand(&gz, 100).unwrap(), "{\"head\":1,\"tail\":2}");
    }

    #[test]
    fn damaged_long_and_foreign_inputs_are_refused() {
        let gz = compress("x".repeat(1000).as_bytes(), 1);
        assert!(expand(&gz, 999).unwrap_err().contains("beyond 999"));
        let mut cut = gz.clone();
        cut.truncate(gz.len() - 5);
        assert!(expand(&cut, 2000).is_err());
        assert!(expand(b"{\"a\":1}", 100).is_err());
        let not_utf8 = compress(&[0xff, 0xfe, 0x00], 1);
        assert!(expand(&not_utf8, 100).unwrap_err().contains("UTF-8"));
    }
}
