//! Raw bytes of a float tensor to chunks of `f32`/`f64` values, read from a file or a stream.
//!
//! A chunk is viewed in place only when it is little-endian `f32`/`f64` at an aligned address on a
//! little-endian machine; otherwise it is converted into a buffer that is reused from chunk to
//! chunk. [`Decoder::decode_copy`] is the plain scalar twin of the in-place path, and the tests
//! check that both agree.

use std::io::Read;

use half::slice::{HalfBitsSliceExt, HalfFloatSliceExt};

use super::{CHUNK, TensorInfo, Values};

/// The four element types that are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    F64,
    F32,
    F16,
    BF16,
}

/// How one element is stored: its type and byte order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Elem {
    pub kind: Kind,
    pub big_endian: bool,
}

impl Elem {
    /// Little-endian `kind`.
    pub const fn le(kind: Kind) -> Self {
        Elem {
            kind,
            big_endian: false,
        }
    }

    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self.kind {
            Kind::F64 => 8,
            Kind::F32 => 4,
            Kind::F16 | Kind::BF16 => 2,
        }
    }

    /// Whether the bytes are already in this machine's order.
    const fn native(self) -> bool {
        self.big_endian == cfg!(target_endian = "big")
    }

    /// An empty chunk of the type the visitor sees for this element.
    pub const fn empty(self) -> Values<'static> {
        match self.kind {
            Kind::F64 => Values::F64(&[]),
            _ => Values::F32(&[]),
        }
    }
}

/// Buffers reused from chunk to chunk.
#[derive(Debug, Default)]
pub(crate) struct Decoder {
    f32s: Vec<f32>,
    f64s: Vec<f64>,
    halves: Vec<u16>,
}

impl Decoder {
    /// The values in `bytes` (a whole number of elements), viewed in place when possible.
    pub fn decode<'a>(&'a mut self, elem: Elem, bytes: &'a [u8]) -> Values<'a> {
        debug_assert_eq!(bytes.len() % elem.size(), 0);
        if elem.native() {
            match elem.kind {
                Kind::F32 => {
                    // SAFETY: every bit pattern is a valid f32; `align_to` only returns a middle
                    // part that is correctly aligned and inside `bytes`.
                    let (head, mid, tail) = unsafe { bytes.align_to::<f32>() };
                    if head.is_empty() && tail.is_empty() {
                        return Values::F32(mid);
                    }
                }
                Kind::F64 => {
                    // SAFETY: as above, for f64.
                    let (head, mid, tail) = unsafe { bytes.align_to::<f64>() };
                    if head.is_empty() && tail.is_empty() {
                        return Values::F64(mid);
                    }
                }
                Kind::F16 | Kind::BF16 => {
                    // SAFETY: as above, for u16.
                    let (head, mid, tail) = unsafe { bytes.align_to::<u16>() };
                    if head.is_empty() && tail.is_empty() {
                        return widen(elem.kind, mid, &mut self.f32s);
                    }
                }
            }
        }
        self.decode_copy(elem, bytes)
    }

    /// The values in `bytes`, always converted element by element into the buffers.
    pub fn decode_copy<'a>(&'a mut self, elem: Elem, bytes: &[u8]) -> Values<'a> {
        let be = elem.big_endian;
        match elem.kind {
            Kind::F32 => {
                self.f32s.clear();
                self.f32s.extend(bytes.chunks_exact(4).map(|b| {
                    let b = [b[0], b[1], b[2], b[3]];
                    if be {
                        f32::from_be_bytes(b)
                    } else {
                        f32::from_le_bytes(b)
                    }
                }));
                Values::F32(&self.f32s)
            }
            Kind::F64 => {
                self.f64s.clear();
                self.f64s.extend(bytes.chunks_exact(8).map(|b| {
                    let b = [b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]];
                    if be {
                        f64::from_be_bytes(b)
                    } else {
                        f64::from_le_bytes(b)
                    }
                }));
                Values::F64(&self.f64s)
            }
            Kind::F16 | Kind::BF16 => {
                self.halves.clear();
                self.halves.extend(bytes.chunks_exact(2).map(|b| {
                    let b = [b[0], b[1]];
                    if be {
                        u16::from_be_bytes(b)
                    } else {
                        u16::from_le_bytes(b)
                    }
                }));
                widen(elem.kind, &self.halves, &mut self.f32s)
            }
        }
    }
}

/// f16/bf16 bit patterns widened to f32 (exact) in `out`.
fn widen<'a>(kind: Kind, bits: &[u16], out: &'a mut Vec<f32>) -> Values<'a> {
    out.clear();
    out.resize(bits.len(), 0.0);
    match kind {
        Kind::BF16 => bits
            .reinterpret_cast::<half::bf16>()
            .convert_to_f32_slice(out),
        _ => bits
            .reinterpret_cast::<half::f16>()
            .convert_to_f32_slice(out),
    }
    Values::F32(out)
}

/// Visits a tensor of `info.len()` elements read from `reader` chunk by chunk, with `bytes` as the
/// reusable read buffer. A tensor of more than one chunk is read on a thread of its own, a chunk
/// ahead of the visits, so that reading (a copy out of the page cache, at least) and the visits'
/// work overlap; the chunks are visited in order either way.
///
/// # Errors
/// What `reader` returns; `UnexpectedEof` if it ends before the last element.
pub(crate) fn visit_stream(
    reader: &mut (dyn Read + Send),
    info: &TensorInfo,
    elem: Elem,
    decoder: &mut Decoder,
    bytes: &mut Vec<u8>,
    visit: &mut dyn FnMut(&TensorInfo, Values<'_>),
) -> std::io::Result<()> {
    let len = info.len();
    if len == 0 {
        visit(info, elem.empty());
        return Ok(());
    }
    let size = elem.size();
    if len <= CHUNK {
        bytes.resize(len * size, 0);
        reader.read_exact(bytes)?;
        visit(info, decoder.decode(elem, bytes));
        return Ok(());
    }
    // Two buffers go round: the reader fills one while the other is visited.
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<std::io::Result<Vec<u8>>>(1);
    let (empty_tx, empty_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
    for buffer in [std::mem::take(bytes), Vec::new()] {
        // The receiver is alive: it is ours until the scope below.
        let _ = empty_tx.send(buffer);
    }
    // Moved in, so that a visit that panics drops both channels' ends and the reader ends too.
    std::thread::scope(move |s| {
        s.spawn(move || {
            let mut left = len;
            // Ends when the visits stop taking buffers (an error, or every chunk read).
            while let (true, Ok(mut buffer)) = (left > 0, empty_rx.recv()) {
                let n = left.min(CHUNK);
                buffer.resize(n * size, 0);
                let read = reader.read_exact(&mut buffer).map(|()| buffer);
                let failed = read.is_err();
                if full_tx.send(read).is_err() || failed {
                    return;
                }
                left -= n;
            }
        });
        let mut left = len;
        while left > 0 {
            let buffer = full_rx
                .recv()
                .map_err(|_| std::io::Error::other("the reading thread stopped"))??;
            visit(info, decoder.decode(elem, &buffer));
            left -= buffer.len() / size;
            if left == 0 {
                *bytes = buffer;
            } else {
                let _ = empty_tx.send(buffer);
            }
        }
        // Lets the reader's last recv end.
        drop(empty_tx);
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KINDS: [Kind; 4] = [Kind::F64, Kind::F32, Kind::F16, Kind::BF16];

    fn to_f64(v: Values<'_>) -> Vec<f64> {
        match v {
            Values::F32(xs) => xs.iter().map(|&x| f64::from(x)).collect(),
            Values::F64(xs) => xs.to_vec(),
        }
    }

    /// Bytes with a varied pattern (all exponents, NaN payloads included).
    fn pattern(n: usize) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
            .collect()
    }

    #[test]
    fn in_place_and_copy_agree_at_every_offset() {
        let raw = pattern(8 * 64 + 8);
        for kind in KINDS {
            for big_endian in [false, true] {
                let elem = Elem { kind, big_endian };
                for offset in 0..8 {
                    let bytes = &raw[offset..offset + 64 * elem.size()];
                    let mut a = Decoder::default();
                    let mut b = Decoder::default();
                    let fast = to_f64(a.decode(elem, bytes));
                    let slow = to_f64(b.decode_copy(elem, bytes));
                    assert_eq!(fast.len(), 64);
                    let same = fast
                        .iter()
                        .zip(&slow)
                        .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()));
                    assert!(same, "{elem:?} at offset {offset}");
                }
            }
        }
    }

    #[test]
    fn decodes_known_values_in_both_byte_orders() {
        let mut d = Decoder::default();
        let le = [0x00, 0x3c, 0x00, 0xc0]; // f16 1.0, -2.0
        assert_eq!(to_f64(d.decode(Elem::le(Kind::F16), &le)), [1.0, -2.0]);
        let be = [0x3c, 0x00, 0xc0, 0x00];
        let elem = Elem {
            kind: Kind::F16,
            big_endian: true,
        };
        assert_eq!(to_f64(d.decode(elem, &be)), [1.0, -2.0]);
        let bf = [0x80, 0x3f]; // bf16 1.0
        assert_eq!(to_f64(d.decode(Elem::le(Kind::BF16), &bf)), [1.0]);
        let f64be = 0.1f64.to_be_bytes();
        let elem = Elem {
            kind: Kind::F64,
            big_endian: true,
        };
        assert_eq!(to_f64(d.decode(elem, &f64be)), [0.1]);
    }

    #[test]
    fn widening_is_exact_for_every_half_pattern() {
        let all: Vec<u16> = (0..=u16::MAX).collect();
        let bytes: Vec<u8> = all.iter().flat_map(|b| b.to_le_bytes()).collect();
        let mut d = Decoder::default();
        let Values::F32(xs) = d.decode(Elem::le(Kind::F16), &bytes) else {
            panic!("f16 must widen to f32")
        };
        for (&b, &x) in all.iter().zip(xs) {
            let h = half::f16::from_bits(b);
            assert!(x.to_bits() == h.to_f32().to_bits() || (x.is_nan() && h.is_nan()));
            assert!(h.is_nan() || f64::from(x) == h.to_f64());
        }
        let Values::F32(xs) = d.decode(Elem::le(Kind::BF16), &bytes) else {
            panic!("bf16 must widen to f32")
        };
        for (&b, &x) in all.iter().zip(xs) {
            // bf16 is the top half of an f32: widening is a shift.
            let expect = f32::from_bits(u32::from(b) << 16);
            assert!(x.to_bits() == expect.to_bits() || (x.is_nan() && expect.is_nan()));
        }
    }

    /// A tensor of several chunks (read a chunk ahead on a thread): every value visited once,
    /// in order; a reader that ends early gives `UnexpectedEof` after the whole chunks it had.
    #[test]
    fn stream_of_several_chunks_visits_in_order_and_reports_a_short_reader() {
        let n = 2 * CHUNK + 5;
        let info = TensorInfo {
            name: "t".into(),
            dtype: super::super::Dtype::F32,
            shape: vec![n],
            path: "t.npy".into(),
        };
        let data: Vec<u8> = (0..n as u32)
            .flat_map(|i| (i as f32).to_le_bytes())
            .collect();
        // How many values a read visits, checking they come in order.
        let read = |data: &[u8]| {
            let mut next = 0f32;
            let mut visit = |_: &TensorInfo, v: Values<'_>| {
                let Values::F32(xs) = v else {
                    panic!("f32 values")
                };
                for &x in xs {
                    assert_eq!(x, next);
                    next += 1.0;
                }
            };
            let (mut decoder, mut bytes) = (Decoder::default(), Vec::new());
            let elem = Elem::le(Kind::F32);
            let done = visit_stream(
                &mut &data[..],
                &info,
                elem,
                &mut decoder,
                &mut bytes,
                &mut visit,
            );
            (done, next as usize)
        };
        let (done, seen) = read(&data);
        assert!(done.is_ok());
        assert_eq!(seen, n);
        let (done, seen) = read(&data[..(CHUNK + 10) * 4]);
        assert_eq!(done.unwrap_err().kind(), std::io::ErrorKind::UnexpectedEof);
        assert_eq!(seen, CHUNK);
    }

    #[test]
    fn stream_reports_a_short_reader() {
        let info = TensorInfo {
            name: "t".into(),
            dtype: super::super::Dtype::F32,
            shape: vec![3],
            path: "t.npy".into(),
        };
        let data = [0u8; 8];
        let mut seen = 0;
        let err = visit_stream(
            &mut &data[..],
            &info,
            Elem::le(Kind::F32),
            &mut Decoder::default(),
            &mut Vec::new(),
            &mut |_, v| seen += v.len(),
        )
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
        assert_eq!(seen, 0);
    }
}
