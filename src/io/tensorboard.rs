//! TensorBoard event files: the record format and the few protobuf messages of scalars and
//! histograms, encoded by hand (no protobuf or CRC dependency).
//!
//! # The record format
//! An event file is a sequence of records (TensorFlow's `TFRecord`), each
//!
//! ```text
//! u64 LE  length of data
//! u32 LE  masked_crc32c(the 8 length bytes)
//! data    length bytes: one serialized `Event`
//! u32 LE  masked_crc32c(data)
//!
//! masked_crc32c(x) = ((c >> 15) | (c << 17)) + 0xa282ead8  (mod 2^32),  c = CRC32C(x)
//! ```
//!
//! CRC32C is the Castagnoli CRC (reflected polynomial `0x82f63b78`, initial value and final xor
//! `0xffffffff`). TensorBoard's reader checks both checksums and stops at the first record that
//! fails, so a wrong checksum hides every event after it.
//!
//! # The messages
//! From `tensorboard/compat/proto/event.proto`, `summary.proto` and `histogram.proto` (proto3),
//! only the fields written here:
//!
//! ```text
//! Event          { double wall_time = 1; int64 step = 2;
//!                  oneof what { string file_version = 3; Summary summary = 5; }
//!                  SourceMetadata source_metadata = 10; }
//! SourceMetadata { string writer = 1; }
//! Summary        { repeated Value value = 1; }
//! Summary.Value  { string tag = 1; oneof value { float simple_value = 2; HistogramProto histo = 5; } }
//! HistogramProto { double min = 1; double max = 2; double num = 3; double sum = 4;
//!                  double sum_squares = 5; repeated double bucket_limit = 6 [packed];
//!                  repeated double bucket = 7 [packed]; }
//! ```
//!
//! The first event of a file carries `file_version = "brain.Event:2"` (and the writer's name);
//! every later one a summary. Fields are written in field-number order and, as protobuf's own
//! serializer does in proto3, a field outside a `oneof` that holds its default (0, an empty
//! string or list) is left out, while a `oneof` member is always written (a `simple_value` of 0
//! must be there, or the value has no kind): the bytes are those of `SerializeToString()`.

use std::io::{self, Write};

/// The version string of the first event of an event file.
pub const FILE_VERSION: &str = "brain.Event:2";

/// The CRC32C (Castagnoli) table, one entry per byte value.
const CRC_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// The CRC32C (Castagnoli) checksum of `data`.
///
/// ```
/// assert_eq!(mixprec::io::tensorboard::crc32c(b"123456789"), 0xe306_9283);
/// ```
#[must_use]
pub fn crc32c(data: &[u8]) -> u32 {
    !data.iter().fold(!0u32, |crc, &b| {
        CRC_TABLE[((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8)
    })
}

/// The checksum a record stores: CRC32C rotated right by 15 bits plus `0xa282ead8`.
#[must_use]
pub fn masked_crc32c(data: &[u8]) -> u32 {
    crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Writes `data` as one record (length, its checksum, the data, its checksum).
///
/// # Errors
/// What `out` returns.
pub fn write_record(out: &mut dyn Write, data: &[u8]) -> io::Result<()> {
    let len = (data.len() as u64).to_le_bytes();
    out.write_all(&len)?;
    out.write_all(&masked_crc32c(&len).to_le_bytes())?;
    out.write_all(data)?;
    out.write_all(&masked_crc32c(data).to_le_bytes())
}

/// A histogram as TensorBoard stores it: bucket `i` holds `bucket[i]` values below
/// `bucket_limit[i]` and at or above the limit before it. TensorBoard draws the first bucket
/// from `min` and the last one up to `max`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistogramProto {
    /// The smallest value.
    pub min: f64,
    /// The largest value.
    pub max: f64,
    /// The number of values.
    pub num: f64,
    /// Their sum.
    pub sum: f64,
    /// The sum of their squares.
    pub sum_squares: f64,
    /// The upper (exclusive) edge of each bucket, increasing.
    pub bucket_limit: Vec<f64>,
    /// The count of each bucket.
    pub bucket: Vec<f64>,
}

/// One value of a summary: a scalar or a histogram, under a tag (`loss`, `weight_grad/0.linear`).
#[derive(Clone, Debug, PartialEq)]
pub enum SummaryValue<'a> {
    /// A scalar (TensorBoard's `simple_value`, an f32).
    Scalar {
        /// The tag.
        tag: &'a str,
        /// The value.
        value: f32,
    },
    /// A histogram.
    Histogram {
        /// The tag.
        tag: &'a str,
        /// The histogram.
        histo: &'a HistogramProto,
    },
}

/// Writes an event file: the version event, then one event per [`EventWriter::write_summary`].
///
/// ```
/// use mixprec::io::tensorboard::{EventWriter, SummaryValue};
///
/// let mut file = Vec::new();
/// let mut events = EventWriter::new(&mut file, 0.0, "mixprec")?;
/// events.write_summary(1.5, 1, &[SummaryValue::Scalar { tag: "loss", value: 2.25 }])?;
/// // Two records: each 8 + 4 + data + 4 bytes.
/// let first = u64::from_le_bytes(file[..8].try_into()?) as usize;
/// let second = u64::from_le_bytes(file[16 + first..24 + first].try_into()?) as usize;
/// assert_eq!(file.len(), 16 + first + 16 + second);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct EventWriter<W: Write> {
    out: W,
}

impl<W: Write> EventWriter<W> {
    /// Starts an event file on `out` with the version event at `wall_time` (seconds since the
    /// Unix epoch), step 0, naming `writer` as its source.
    ///
    /// # Errors
    /// What `out` returns.
    pub fn new(mut out: W, wall_time: f64, writer: &str) -> io::Result<Self> {
        let mut event = Message::default();
        event.double(1, wall_time);
        event.int64(2, 0);
        event.oneof_string(3, FILE_VERSION);
        let mut source = Message::default();
        source.string(1, writer);
        event.message(10, &source);
        write_record(&mut out, &event.0)?;
        Ok(EventWriter { out })
    }

    /// Writes one event holding `values` at `step` and `wall_time`.
    ///
    /// # Errors
    /// What `out` returns.
    pub fn write_summary(
        &mut self,
        wall_time: f64,
        step: i64,
        values: &[SummaryValue<'_>],
    ) -> io::Result<()> {
        write_record(&mut self.out, &summary_event(wall_time, step, values))
    }

    /// The output, after the last event.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// The serialized `Event` of a summary.
#[must_use]
pub fn summary_event(wall_time: f64, step: i64, values: &[SummaryValue<'_>]) -> Vec<u8> {
    let mut summary = Message::default();
    for value in values {
        let mut v = Message::default();
        match value {
            SummaryValue::Scalar { tag, value } => {
                v.string(1, tag);
                v.oneof_float(2, *value);
            }
            SummaryValue::Histogram { tag, histo } => {
                v.string(1, tag);
                v.message(5, &histogram(histo));
            }
        }
        summary.message(1, &v);
    }
    let mut event = Message::default();
    event.double(1, wall_time);
    event.int64(2, step);
    event.message(5, &summary);
    event.0
}

fn histogram(h: &HistogramProto) -> Message {
    let mut m = Message::default();
    m.double(1, h.min);
    m.double(2, h.max);
    m.double(3, h.num);
    m.double(4, h.sum);
    m.double(5, h.sum_squares);
    m.packed_doubles(6, &h.bucket_limit);
    m.packed_doubles(7, &h.bucket);
    m
}

/// A protobuf message being encoded: fields appended in the order written.
#[derive(Default)]
struct Message(Vec<u8>);

/// Wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LENGTH_DELIMITED: u32 = 2;
const FIXED32: u32 = 5;

impl Message {
    fn varint(&mut self, mut x: u64) {
        while x >= 0x80 {
            self.0.push((x as u8) | 0x80);
            x >>= 7;
        }
        self.0.push(x as u8);
    }

    fn key(&mut self, field: u32, wire: u32) {
        self.varint(u64::from(field << 3 | wire));
    }

    /// A `double` outside a `oneof`: left out when it is +0 (protobuf compares the bits, so -0
    /// is written).
    fn double(&mut self, field: u32, x: f64) {
        if x.to_bits() != 0 {
            self.key(field, FIXED64);
            self.0.extend_from_slice(&x.to_le_bytes());
        }
    }

    /// A `float` member of a `oneof`: always written.
    fn oneof_float(&mut self, field: u32, x: f32) {
        self.key(field, FIXED32);
        self.0.extend_from_slice(&x.to_le_bytes());
    }

    /// An `int64` outside a `oneof` (left out when 0): the varint of its two's complement (10
    /// bytes when negative).
    fn int64(&mut self, field: u32, x: i64) {
        if x != 0 {
            self.key(field, VARINT);
            self.varint(x as u64);
        }
    }

    fn bytes(&mut self, field: u32, data: &[u8]) {
        self.key(field, LENGTH_DELIMITED);
        self.varint(data.len() as u64);
        self.0.extend_from_slice(data);
    }

    /// A `string` outside a `oneof` (left out when empty).
    fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    /// A `string` member of a `oneof`: always written.
    fn oneof_string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    /// A message field (a `oneof` member or not): always written, as protobuf writes a message
    /// field that is set.
    fn message(&mut self, field: u32, m: &Message) {
        self.bytes(field, &m.0);
    }

    /// A packed `repeated double` (left out when empty).
    fn packed_doubles(&mut self, field: u32, xs: &[f64]) {
        if xs.is_empty() {
            return;
        }
        self.key(field, LENGTH_DELIMITED);
        self.varint(8 * xs.len() as u64);
        for x in xs {
            self.0.extend_from_slice(&x.to_le_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bit by bit, from the definition: the reference the table-driven CRC is checked against.
    fn crc32c_bitwise(data: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                let mask = (crc & 1).wrapping_neg();
                crc = (crc >> 1) ^ (0x82f6_3b78 & mask);
            }
        }
        !crc
    }

    #[test]
    fn crc32c_known_vectors() {
        // The check value of CRC-32C (RFC 3720, section B.4's iSCSI vectors).
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c(&[0u8; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
    }

    #[test]
    fn crc32c_table_equals_the_bitwise_definition() {
        let data: Vec<u8> = (0..1031u32).map(|i| (i * 7919 % 251) as u8).collect();
        for n in [0, 1, 2, 7, 8, 9, 255, 1031] {
            assert_eq!(crc32c(&data[..n]), crc32c_bitwise(&data[..n]), "{n} bytes");
        }
    }

    #[test]
    #[allow(clippy::manual_rotate)] // the mask as TensorFlow's crc32c.h writes it
    fn masked_crc_is_the_rotation_plus_the_constant() {
        let c = crc32c(b"123456789");
        assert_eq!(
            masked_crc32c(b"123456789"),
            ((c >> 15) | (c << 17)).wrapping_add(0xa282_ead8)
        );
        // TensorBoard's masked_crc32c (tensorboard/compat/tensorflow_stub) of the 8 length bytes
        // of a 25-byte record, which every reader checks first.
        assert_eq!(masked_crc32c(&25u64.to_le_bytes()), 0x2808_f18b);
    }

    #[test]
    fn a_record_is_length_crc_data_crc() {
        let mut out = Vec::new();
        write_record(&mut out, b"abc").unwrap();
        assert_eq!(out.len(), 8 + 4 + 3 + 4);
        assert_eq!(&out[..8], &3u64.to_le_bytes());
        assert_eq!(&out[8..12], &masked_crc32c(&out[..8]).to_le_bytes());
        assert_eq!(&out[12..15], b"abc");
        assert_eq!(&out[15..], &masked_crc32c(b"abc").to_le_bytes());
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The bytes protobuf's own serializer gives (tensorboard 2.21.0's `event_pb2`, protobuf
    /// 7.36.2): `Event(wall_time=0.0, step=0, file_version='brain.Event:2',
    /// source_metadata=SourceMetadata(writer='mixprec')).SerializeToString()`.
    #[test]
    fn the_version_event_is_protobufs_bytes() {
        let mut out = Vec::new();
        EventWriter::new(&mut out, 0.0, "mixprec").unwrap();
        assert_eq!(
            hex(&out[12..out.len() - 4]),
            "1a0d627261696e2e4576656e743a3252090a076d697870726563"
        );
    }

    /// `Event(wall_time=1.5, step=3, summary=Summary(value=[Value(tag='loss', simple_value=0.0),
    /// Value(tag='h', histo=HistogramProto(min=0.0, max=3.0, num=5.0, sum=6.5, sum_squares=11.25,
    /// bucket_limit=[0.5, 1.0, 4.0], bucket=[1.0, 0.0, 4.0]))])).SerializeToString()`, as above.
    #[test]
    fn a_summary_event_is_protobufs_bytes() {
        let histo = HistogramProto {
            min: 0.0,
            max: 3.0,
            num: 5.0,
            sum: 6.5,
            sum_squares: 11.25,
            bucket_limit: vec![0.5, 1.0, 4.0],
            bucket: vec![1.0, 0.0, 4.0],
        };
        let values = [
            SummaryValue::Scalar {
                tag: "loss",
                value: 0.0,
            },
            SummaryValue::Histogram {
                tag: "h",
                histo: &histo,
            },
        ];
        assert_eq!(
            hex(&summary_event(1.5, 3, &values)),
            "09000000000000f83f10032a6c0a0b0a046c6f737315000000000a5d0a01682a5811000000000000084019\
             0000000000001440210000000000001a402900000000008026403218000000000000e03f000000000000f0\
             3f00000000000010403a18000000000000f03f00000000000000000000000000001040"
        );
    }

    #[test]
    fn varints_and_negative_int64() {
        let mut m = Message::default();
        m.varint(0);
        m.varint(1);
        m.varint(127);
        m.varint(128);
        m.varint(300);
        m.varint(u64::MAX);
        let mut expected = vec![0x00, 0x01, 0x7f, 0x80, 0x01, 0xac, 0x02];
        expected.extend_from_slice(&[0xff; 9]);
        expected.push(0x01);
        assert_eq!(m.0, expected);
        let mut m = Message::default();
        m.int64(2, -1);
        assert_eq!(m.0.len(), 1 + 10);
    }
}
