//! The `.npy` header: magic, version, and a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }`.
//!
//! The dict is parsed with a small recursive-descent parser for the Python literals numpy writes
//! (strings, integers, `True`/`False`/`None`, tuples, lists, dicts), with a depth limit so that no
//! input can exhaust the stack. Python 2 files wrote `3L` for integers: the suffix is accepted.

use super::super::Dtype;
use super::super::decode::{Elem, Kind};

/// The magic string that starts every `.npy` file.
pub(crate) const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// The largest dict accepted (numpy's own readers refuse more than 10 000 bytes by default).
pub(crate) const MAX_DICT: usize = 1 << 20;

/// Deepest nesting of brackets accepted in the dict (structured dtypes nest a few levels).
const MAX_DEPTH: usize = 32;

/// What the header says about the array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Header {
    /// The dtype: `F64`, `F32`, `F16`, or `Other(descr)`.
    pub dtype: Dtype,
    /// How to decode the elements, `None` for a dtype that is skipped.
    pub elem: Option<Elem>,
    /// Column-major storage (irrelevant to statistics, kept for completeness).
    pub fortran_order: bool,
    /// The shape, empty for a scalar.
    pub shape: Vec<usize>,
    /// The number of data bytes the header describes, `None` for a skipped dtype.
    pub data_bytes: Option<usize>,
}

/// From the first 8 bytes (magic and version): the length of the fixed prelude (10 or 12 bytes)
/// that ends with the little-endian dict length.
pub(crate) fn prelude_len(first: &[u8]) -> Result<usize, String> {
    if first.len() < 8 {
        return Err(format!(
            "truncated .npy header: {} bytes, fewer than the 8 of magic and version",
            first.len()
        ));
    }
    if &first[..6] != MAGIC {
        return Err("not a .npy file: it does not start with the magic \\x93NUMPY".to_string());
    }
    match (first[6], first[7]) {
        (1, 0) => Ok(10),
        (2 | 3, 0) => Ok(12),
        (major, minor) => Err(format!(
            "unsupported .npy format version {major}.{minor} (1.0, 2.0 and 3.0 are read)"
        )),
    }
}

/// The dict length stored at the end of `prelude` (10 or 12 bytes, see [`prelude_len`]).
pub(crate) fn dict_len(prelude: &[u8]) -> Result<usize, String> {
    let n = match prelude {
        [.., a, b] if prelude.len() == 10 => usize::from(u16::from_le_bytes([*a, *b])),
        [.., a, b, c, d] if prelude.len() == 12 => {
            usize::try_from(u32::from_le_bytes([*a, *b, *c, *d])).unwrap_or(usize::MAX)
        }
        _ => return Err("truncated .npy header: incomplete header length".to_string()),
    };
    if n > MAX_DICT {
        return Err(format!(
            "invalid .npy header: a header of {n} bytes is larger than the {MAX_DICT} accepted"
        ));
    }
    Ok(n)
}

/// Parses the header dict.
pub(crate) fn parse(dict: &[u8]) -> Result<Header, String> {
    let mut parser = Parser { s: dict, pos: 0 };
    let value = parser
        .value(0)
        .map_err(|e| format!("invalid .npy header (not a Python dict literal): {e}"))?;
    parser.skip_ws();
    if parser.pos != dict.len() {
        return Err(format!(
            "invalid .npy header: unexpected text after the dict at byte {}",
            parser.pos
        ));
    }
    let Lit::Dict(entries) = value else {
        return Err("invalid .npy header: not a dict".to_string());
    };
    let get = |key: &str| {
        entries
            .iter()
            .find(|(k, _)| matches!(k, Lit::Str(s) if s == key))
            .map(|(_, v)| v)
            .ok_or_else(|| format!("invalid .npy header: no '{key}' key"))
    };
    let (dtype, elem) = dtype_of(get("descr")?)?;
    let fortran_order = match get("fortran_order")? {
        Lit::Bool(b) => *b,
        _ => return Err("invalid .npy header: 'fortran_order' is not True or False".to_string()),
    };
    let Lit::Seq(dims) = get("shape")? else {
        return Err("invalid .npy header: 'shape' is not a tuple".to_string());
    };
    let mut shape = Vec::with_capacity(dims.len());
    for dim in dims {
        match dim {
            Lit::Int(n) if *n >= 0 => shape.push(
                usize::try_from(*n)
                    .map_err(|_| format!("invalid .npy header: dimension {n} is too large"))?,
            ),
            _ => return Err(
                "invalid .npy header: 'shape' holds something other than a non-negative integer"
                    .to_string(),
            ),
        }
    }
    let too_big = || format!("invalid .npy header: shape {shape:?} has too many elements");
    let len = shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(too_big)?;
    let data_bytes = match elem {
        Some(elem) => Some(len.checked_mul(elem.size()).ok_or_else(too_big)?),
        None => None,
    };
    Ok(Header {
        dtype,
        elem,
        fortran_order,
        shape,
        data_bytes,
    })
}

/// The dtype of a `descr` value: `<f8`, `>f4`, `=f2` and so on are read; other strings
/// (integers, bool, complex, object, ...) and structured dtypes (lists) are skipped. An unknown
/// `descr` is kept escaped (`'>f\n8'`), since it goes into one-line messages and listings.
fn dtype_of(descr: &Lit) -> Result<(Dtype, Option<Elem>), String> {
    let escaped;
    let text = match descr {
        Lit::Str(s) if s.chars().any(|c| c.is_control() || c == '\\') => {
            escaped = s.escape_debug().to_string();
            &escaped
        }
        Lit::Str(s) => s,
        Lit::Seq(_) => return Ok((Dtype::Other("structured".to_string()), None)),
        _ => return Err("invalid .npy header: 'descr' is not a dtype".to_string()),
    };
    let big_endian = match text.as_bytes().first() {
        Some(b'<') => false,
        Some(b'>') => true,
        Some(b'=') => cfg!(target_endian = "big"),
        _ => return Ok((Dtype::Other(text.clone()), None)),
    };
    let (dtype, kind) = match &text[1..] {
        "f8" => (Dtype::F64, Kind::F64),
        "f4" => (Dtype::F32, Kind::F32),
        "f2" => (Dtype::F16, Kind::F16),
        _ => return Ok((Dtype::Other(text.clone()), None)),
    };
    Ok((dtype, Some(Elem { kind, big_endian })))
}

/// The Python literals that can appear in a header.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Lit {
    Str(String),
    Int(i64),
    Bool(bool),
    None,
    /// A tuple or a list.
    Seq(Vec<Lit>),
    Dict(Vec<(Lit, Lit)>),
}

struct Parser<'a> {
    s: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(|c| c.is_ascii_whitespace()) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected(&format!("'{}'", char::from(c))))
        }
    }

    fn unexpected(&self, wanted: &str) -> String {
        match self.peek() {
            Some(c) => format!(
                "expected {wanted} at byte {}, found '{}'",
                self.pos,
                char::from(c).escape_default()
            ),
            None => format!("expected {wanted} at byte {}, found the end", self.pos),
        }
    }

    fn value(&mut self, depth: usize) -> Result<Lit, String> {
        if depth > MAX_DEPTH {
            return Err(format!("nested deeper than {MAX_DEPTH} levels"));
        }
        self.skip_ws();
        match self.peek() {
            Some(b'{') => {
                self.pos += 1;
                let mut entries = Vec::new();
                while !self.close(b'}') {
                    let key = self.value(depth + 1)?;
                    self.expect(b':')?;
                    let value = self.value(depth + 1)?;
                    entries.push((key, value));
                    if !self.comma_or(b'}')? {
                        break;
                    }
                }
                Ok(Lit::Dict(entries))
            }
            Some(open @ (b'(' | b'[')) => {
                self.pos += 1;
                let close = if open == b'(' { b')' } else { b']' };
                let mut items = Vec::new();
                while !self.close(close) {
                    items.push(self.value(depth + 1)?);
                    if !self.comma_or(close)? {
                        break;
                    }
                }
                Ok(Lit::Seq(items))
            }
            Some(quote @ (b'\'' | b'"')) => self.string(quote),
            Some(c) if c == b'-' || c.is_ascii_digit() => self.int(),
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric()) {
                    self.pos += 1;
                }
                match &self.s[start..self.pos] {
                    b"True" => Ok(Lit::Bool(true)),
                    b"False" => Ok(Lit::Bool(false)),
                    b"None" => Ok(Lit::None),
                    word => Err(format!(
                        "unknown name '{}' at byte {start}",
                        String::from_utf8_lossy(word)
                    )),
                }
            }
            _ => Err(self.unexpected("a value")),
        }
    }

    /// Consumes `close` (after whitespace) if it is next.
    fn close(&mut self, close: u8) -> bool {
        self.skip_ws();
        if self.peek() == Some(close) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    /// After an item: a comma (true, more may follow) or the closing bracket (false, consumed).
    fn comma_or(&mut self, close: u8) -> Result<bool, String> {
        self.skip_ws();
        match self.peek() {
            Some(b',') => {
                self.pos += 1;
                Ok(true)
            }
            Some(c) if c == close => {
                self.pos += 1;
                Ok(false)
            }
            _ => Err(self.unexpected(&format!("',' or '{}'", char::from(close)))),
        }
    }

    fn string(&mut self, quote: u8) -> Result<Lit, String> {
        let start = self.pos;
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            match self.peek() {
                None => return Err(format!("unterminated string starting at byte {start}")),
                Some(c) if c == quote => {
                    self.pos += 1;
                    return Ok(Lit::Str(String::from_utf8_lossy(&out).into_owned()));
                }
                Some(b'\\') => {
                    self.pos += 1;
                    match self.peek() {
                        Some(c) => out.push(c),
                        None => {
                            return Err(format!("unterminated string starting at byte {start}"));
                        }
                    }
                    self.pos += 1;
                }
                Some(c) => {
                    out.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn int(&mut self) -> Result<Lit, String> {
        let start = self.pos;
        if self.peek() == Some(b'-') {
            self.pos += 1;
        }
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.pos]).unwrap_or("");
        let n = text
            .parse::<i64>()
            .map_err(|_| format!("invalid integer '{text}' at byte {start}"))?;
        // Python 2 long integers: `3L`.
        if matches!(self.peek(), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        Ok(Lit::Int(n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_numpy_writes() {
        let h = parse(b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }          \n")
            .unwrap();
        assert_eq!(h.dtype, Dtype::F32);
        assert_eq!(h.shape, [3, 4]);
        assert!(!h.fortran_order);
        assert_eq!(h.data_bytes, Some(48));
        let h = parse(b"{'descr': '>f8', 'fortran_order': True, 'shape': (5,), }").unwrap();
        assert_eq!(
            h.elem,
            Some(Elem {
                kind: Kind::F64,
                big_endian: true
            })
        );
        assert!(h.fortran_order);
        let h = parse(b"{'descr': '<f2', 'fortran_order': False, 'shape': ()}").unwrap();
        assert_eq!(
            (h.dtype, h.shape, h.data_bytes),
            (Dtype::F16, vec![], Some(2))
        );
        let h =
            parse(b"{\"shape\": (2L, 0L), \"fortran_order\": False, \"descr\": \"<f8\"}").unwrap();
        assert_eq!((h.shape, h.data_bytes), (vec![2, 0], Some(0)));
    }

    #[test]
    fn other_dtypes_are_skipped_not_errors() {
        for descr in [
            "'<i8'",
            "'|b1'",
            "'<c16'",
            "'|O'",
            "'<U5'",
            "[('a', '<f4'), ('b', '<i4')]",
        ] {
            let text = format!("{{'descr': {descr}, 'fortran_order': False, 'shape': (2,), }}");
            let h = parse(text.as_bytes()).unwrap();
            assert_eq!(h.elem, None, "{descr}");
            assert!(!h.dtype.is_supported());
        }
    }

    #[test]
    fn bad_headers_are_named() {
        let cases: [(&[u8], &str); 9] = [
            (b"{'descr': '<f4', 'fortran_order': False}", "no 'shape' key"),
            (b"['descr']", "not a dict"),
            (b"{'descr': '<f4', 'fortran_order': False, 'shape': (3, -1)}", "non-negative"),
            (b"{'descr': '<f4', 'fortran_order': 0, 'shape': (3,)}", "fortran_order"),
            (b"{'descr': '<f4', 'fortran_order': False, 'shape': 3}", "not a tuple"),
            (b"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", "expected"),
            (b"{'descr': '<f4", "unterminated string"),
            (b"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296)}", "too many elements"),
            (b"{} junk", "unexpected text"),
        ];
        for (text, needle) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(needle), "{err} should mention {needle}");
            assert!(!err.contains('\n'));
        }
        let deep = format!("{}{}", "[".repeat(1000), "]".repeat(1000));
        assert!(
            parse(deep.as_bytes())
                .unwrap_err()
                .contains("nested deeper")
        );
    }

    #[test]
    fn prelude_versions() {
        assert_eq!(prelude_len(b"\x93NUMPY\x01\x00"), Ok(10));
        assert_eq!(prelude_len(b"\x93NUMPY\x03\x00"), Ok(12));
        assert!(
            prelude_len(b"\x93NUMPY\x04\x00")
                .unwrap_err()
                .contains("version 4.0")
        );
        assert!(
            prelude_len(b"PK\x03\x04\x00\x00\x00\x00")
                .unwrap_err()
                .contains("magic")
        );
        assert!(prelude_len(b"\x93NU").unwrap_err().contains("truncated"));
        assert_eq!(dict_len(b"\x93NUMPY\x01\x00\x76\x00"), Ok(0x76));
        assert_eq!(dict_len(b"\x93NUMPY\x02\x00\x00\x00\x01\x00"), Ok(1 << 16));
        assert!(
            dict_len(b"\x93NUMPY\x02\x00\xff\xff\xff\xff")
                .unwrap_err()
                .contains("larger")
        );
    }

    proptest::proptest! {
        /// Any text made of the header's own tokens parses or fails cleanly, never panics.
        #[test]
        fn arbitrary_token_soup_never_panics(text in "[{}()\\[\\]:,'\" 0-9L<>=|fi-]{0,80}|\\{'descr': '[<>=|]?[a-z][0-9]', 'fortran_order': (True|False), 'shape': \\([0-9, L-]{0,20}\\),? *\\}") {
            let _ = parse(text.as_bytes());
        }
    }
}
