//! The central directory of a zip archive, checked before any entry is decompressed.
//!
//! A zip's central directory lists each entry's name, sizes and the offset of its local header;
//! nothing in the format stops two entries from pointing at the same bytes. An archive whose
//! thousands of entries all point at one highly compressed stream (or whose entries overlap so
//! that one entry's data holds the next one's header) makes a file of a few hundred kilobytes
//! stand for terabytes of decompression. So the readers parse the directory themselves and refuse:
//! - entries whose spans (local header, name, extra field and compressed data) overlap, or lie
//!   outside the file or inside the central directory;
//! - a name given twice (a zip library keeps one of them and silently drops the other).
//!
//! With no overlap, the compressed sizes add up to at most the file's size, and deflate expands
//! data at most 1032-fold, so the work of reading every entry is bounded by the file's size.
//!
//! Layout (APPNOTE 6.3.x): the end-of-central-directory record (signature `PK\5\6`, 22 bytes plus
//! a comment of at most 65 535) at the end; with ZIP64, a locator (`PK\6\7`, 20 bytes) just
//! before it pointing at the ZIP64 end record (`PK\6\6`); the directory's file headers (`PK\1\2`,
//! 46 bytes plus name, extra field and comment); each entry's local header (`PK\3\4`, 30 bytes
//! plus name and extra field) followed by its data.

use std::io::{Read, Seek, SeekFrom};

/// One entry of the central directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The name (lossily decoded).
    pub name: String,
    /// Where its local header starts.
    pub offset: u64,
    /// Where its compressed data ends: the end of its span.
    pub end: u64,
    /// The compressed size.
    pub compressed: u64,
    /// The uncompressed size the directory declares.
    pub size: u64,
}

/// Most entries accepted (the ZIP64 count is 64 bits; a real `.npz` holds a few hundred).
const MAX_ENTRIES: u64 = 1 << 20;

const EOCD: u32 = 0x0605_4b50;
const ZIP64_LOCATOR: u32 = 0x0706_4b50;
const ZIP64_EOCD: u32 = 0x0606_4b50;
const FILE_HEADER: u32 = 0x0201_4b50;
const LOCAL_HEADER: u32 = 0x0403_4b50;

/// The entries of the archive in `file` (of `len` bytes), in directory order, once checked.
///
/// # Errors
/// A one-line problem: no end record, a directory out of range or cut short, an entry outside
/// the file, two overlapping entries, a name given twice; or a read error.
pub(crate) fn read<R: Read + Seek>(file: &mut R, len: u64) -> Result<Vec<Entry>, String> {
    let io = |e: std::io::Error| format!("cannot read the zip directory: {e}");
    let (count, cd_offset, cd_size) = end_record(file, len)?;
    if count > MAX_ENTRIES {
        return Err(format!(
            "the zip directory lists {count} entries, more than the {MAX_ENTRIES} accepted"
        ));
    }
    cd_offset
        .checked_add(cd_size)
        .filter(|&end| end <= len)
        .ok_or_else(|| {
            format!("the central directory ({cd_size} bytes at {cd_offset}) runs past the end of the file ({len} bytes)")
        })?;
    if count.saturating_mul(46) > cd_size {
        return Err(format!(
            "{count} entries cannot fit in a central directory of {cd_size} bytes"
        ));
    }
    let mut dir = vec![0; cd_size as usize];
    file.seek(SeekFrom::Start(cd_offset)).map_err(io)?;
    file.read_exact(&mut dir).map_err(io)?;
    let mut entries = Vec::with_capacity(count as usize);
    let mut at = 0usize;
    for index in 0..count {
        let cut = || format!("the central directory ends inside entry #{index}");
        let head = dir.get(at..at + 46).ok_or_else(cut)?;
        if u32_at(head, 0) != FILE_HEADER {
            return Err(format!(
                "entry #{index} of the central directory has a bad signature"
            ));
        }
        let mut compressed = u64::from(u32_at(head, 20));
        let mut size = u64::from(u32_at(head, 24));
        let name_len = usize::from(u16_at(head, 28));
        let extra_len = usize::from(u16_at(head, 30));
        let comment_len = usize::from(u16_at(head, 32));
        let mut offset = u64::from(u32_at(head, 42));
        let name_start = at + 46;
        let extra_start = name_start + name_len;
        let next = extra_start + extra_len + comment_len;
        let name = dir.get(name_start..extra_start).ok_or_else(cut)?;
        let name = String::from_utf8_lossy(name).into_owned();
        let extra = dir
            .get(extra_start..extra_start + extra_len)
            .ok_or_else(cut)?;
        // ZIP64: the fields that are all ones are in the extra field, in this order.
        apply_zip64(extra, [&mut size, &mut compressed, &mut offset]).map_err(|()| {
            format!(
                "entry '{}' has a truncated ZIP64 field",
                name.escape_debug()
            )
        })?;
        entries.push(Entry {
            name,
            offset,
            end: 0,
            compressed,
            size,
        });
        at = next;
    }
    for entry in &mut entries {
        entry.end = span_end(file, entry, cd_offset)?;
    }
    let mut by_name: Vec<&Entry> = entries.iter().collect();
    by_name.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = by_name.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(format!(
            "the entry name '{}' appears more than once in the archive",
            w[0].name.escape_debug()
        ));
    }
    let mut by_offset: Vec<&Entry> = entries.iter().collect();
    by_offset.sort_by_key(|e| (e.offset, e.end));
    if let Some(w) = by_offset.windows(2).find(|w| w[1].offset < w[0].end) {
        return Err(format!(
            "entries '{}' and '{}' overlap in the file (bytes {}..{} and {}..{}): refused, as a zip bomb would be",
            w[0].name.escape_debug(),
            w[1].name.escape_debug(),
            w[0].offset,
            w[0].end,
            w[1].offset,
            w[1].end
        ));
    }
    Ok(entries)
}

/// The entry count, offset and size of the central directory, from the end record (or its ZIP64
/// version).
fn end_record<R: Read + Seek>(file: &mut R, len: u64) -> Result<(u64, u64, u64), String> {
    let io = |e: std::io::Error| format!("cannot read the zip directory: {e}");
    let tail_len = len.min(22 + 65_535);
    let mut tail = vec![0; tail_len as usize];
    file.seek(SeekFrom::Start(len - tail_len)).map_err(io)?;
    file.read_exact(&mut tail).map_err(io)?;
    let at = (0..tail.len().saturating_sub(21))
        .rev()
        .find(|&i| u32_at(&tail, i) == EOCD)
        .ok_or("no end-of-central-directory record")?;
    let eocd = &tail[at..];
    let eocd_pos = len - tail_len + at as u64;
    let count = u64::from(u16_at(eocd, 10));
    let cd_size = u64::from(u32_at(eocd, 12));
    let cd_offset = u64::from(u32_at(eocd, 16));
    if count != 0xffff && cd_size != 0xffff_ffff && cd_offset != 0xffff_ffff {
        return Ok((count, cd_offset, cd_size));
    }
    // ZIP64: the locator sits just before the end record.
    let bad = || "a ZIP64 end record is missing or out of range".to_string();
    let locator_pos = eocd_pos.checked_sub(20).ok_or_else(bad)?;
    let mut locator = [0u8; 20];
    file.seek(SeekFrom::Start(locator_pos)).map_err(io)?;
    file.read_exact(&mut locator).map_err(io)?;
    if u32_at(&locator, 0) != ZIP64_LOCATOR {
        return Err(bad());
    }
    let record_pos = u64_at(&locator, 8);
    if record_pos
        .checked_add(56)
        .is_none_or(|end| end > locator_pos)
    {
        return Err(bad());
    }
    let mut record = [0u8; 56];
    file.seek(SeekFrom::Start(record_pos)).map_err(io)?;
    file.read_exact(&mut record).map_err(io)?;
    if u32_at(&record, 0) != ZIP64_EOCD {
        return Err(bad());
    }
    Ok((
        u64_at(&record, 32),
        u64_at(&record, 48),
        u64_at(&record, 40),
    ))
}

/// Where `entry`'s span ends: after its local header, name, extra field and compressed data,
/// which must all come before the central directory.
fn span_end<R: Read + Seek>(file: &mut R, entry: &Entry, cd_offset: u64) -> Result<u64, String> {
    let name = entry.name.escape_debug();
    let outside = || {
        format!(
            "entry '{name}' (at byte {}, {} bytes compressed) lies outside the data before the central directory",
            entry.offset, entry.compressed
        )
    };
    if entry
        .offset
        .checked_add(30)
        .is_none_or(|end| end > cd_offset)
    {
        return Err(outside());
    }
    let mut head = [0u8; 30];
    file.seek(SeekFrom::Start(entry.offset))
        .and_then(|_| file.read_exact(&mut head))
        .map_err(|e| format!("cannot read the zip directory: {e}"))?;
    if u32_at(&head, 0) != LOCAL_HEADER {
        return Err(format!("entry '{name}' does not point at a local header"));
    }
    let local = 30 + u64::from(u16_at(&head, 26)) + u64::from(u16_at(&head, 28));
    entry
        .offset
        .checked_add(local)
        .and_then(|x| x.checked_add(entry.compressed))
        .filter(|&end| end <= cd_offset)
        .ok_or_else(outside)
}

/// Applies the ZIP64 extended-information fields (id 1) in `extra` to `[size, compressed,
/// offset]`, the way the zip crate reads them (so this checks what will be decompressed): field
/// after field, each holding the values that are all ones so far (or all three when it is 24
/// bytes or longer), in that order. The zip crate writes two such fields, the first a
/// placeholder whose values are all ones.
fn apply_zip64(extra: &[u8], fields: [&mut u64; 3]) -> Result<(), ()> {
    let mut fields = fields;
    let mut at = 0;
    while at + 4 <= extra.len() {
        let id = u16_at(extra, at);
        let size = usize::from(u16_at(extra, at + 2));
        let body = extra.get(at + 4..at + 4 + size).ok_or(())?;
        if id == 1 {
            let mut values = body.chunks_exact(8).map(|b| u64_at(b, 0));
            for field in &mut fields {
                if size >= 24 || **field == 0xffff_ffff {
                    **field = values.next().ok_or(())?;
                }
            }
        }
        at += 4 + size;
    }
    Ok(())
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Cursor, Write};

    /// An archive of stored entries written by the zip crate.
    fn archive(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored);
        for (name, bytes) in entries {
            w.start_file(*name, options).unwrap();
            w.write_all(bytes).unwrap();
        }
        w.finish().unwrap().into_inner()
    }

    fn entries(bytes: &[u8]) -> Result<Vec<Entry>, String> {
        read(&mut Cursor::new(bytes), bytes.len() as u64)
    }

    #[test]
    fn reads_what_the_zip_crate_writes() {
        let bytes = archive(&[("a.npy", b"hello"), ("b.npy", b"")]);
        let e = entries(&bytes).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(
            (e[0].name.as_str(), e[0].size, e[0].compressed),
            ("a.npy", 5, 5)
        );
        assert_eq!(e[1].offset, e[0].end);
    }

    /// The central directory's file headers of `bytes`, each as (position, length).
    fn headers(bytes: &[u8]) -> Vec<(usize, usize)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i + 46 <= bytes.len() {
            if u32_at(bytes, i) == FILE_HEADER {
                let n = 46
                    + usize::from(u16_at(bytes, i + 28))
                    + usize::from(u16_at(bytes, i + 30))
                    + usize::from(u16_at(bytes, i + 32));
                out.push((i, n));
                i += n;
            } else {
                i += 1;
            }
        }
        out
    }

    #[test]
    fn overlapping_entries_are_refused() {
        // Point the second entry's directory record at the first entry's local header.
        let mut bytes = archive(&[("a.npy", b"hello"), ("b.npy", b"world")]);
        let h = headers(&bytes);
        let first_offset = u32_at(&bytes, h[0].0 + 42);
        bytes[h[1].0 + 42..h[1].0 + 46].copy_from_slice(&first_offset.to_le_bytes());
        let e = entries(&bytes).unwrap_err();
        assert!(
            e.contains("overlap") && e.contains("'a.npy'") && e.contains("'b.npy'"),
            "{e}"
        );
    }

    #[test]
    fn a_name_given_twice_is_refused() {
        let mut bytes = archive(&[("a.npy", b"hello"), ("b.npy", b"world")]);
        // Rename b.npy to a.npy in both its local header and its directory record.
        let at: Vec<usize> = bytes
            .windows(5)
            .enumerate()
            .filter(|(_, w)| *w == b"b.npy")
            .map(|(i, _)| i)
            .collect();
        for i in at {
            bytes[i] = b'a';
        }
        let e = entries(&bytes).unwrap_err();
        assert!(e.contains("'a.npy' appears more than once"), "{e}");
    }

    #[test]
    fn out_of_range_and_garbage_are_one_line_errors() {
        let bytes = archive(&[("a.npy", b"hello")]);
        let h = headers(&bytes);
        let mut far = bytes.clone();
        far[h[0].0 + 20..h[0].0 + 24].copy_from_slice(&u32::MAX.to_le_bytes());
        let e = entries(&far).unwrap_err();
        assert!(e.contains("outside"), "{e}");
        for cut in 0..bytes.len() {
            if let Err(e) = entries(&bytes[..cut]) {
                assert!(!e.contains('\n'));
            }
        }
        assert!(
            entries(b"hello")
                .unwrap_err()
                .contains("no end-of-central-directory")
        );
    }
}
