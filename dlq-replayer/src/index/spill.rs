//! The index past its memory budget: the oldest entries move to a file on local disk, in segments of up to
//! [`SEGMENT_ENTRIES`] entries of one partition, each entry a fixed record of [`RECORD_BYTES`] and the segment's
//! event ids and error messages after them. Memory then holds only the newest entries, the interned strings and
//! one small [`Segment`] per 65,536 entries on disk; a scan (`list`, `stats`, the gauges) reads the segments back
//! one at a time, with `pread`, so that what the kernel caches of the file is page cache, not the process's memory.
//!
//! The file is unlinked as soon as it is created: it lives as long as the index, and a killed process leaves
//! nothing behind. Kafka stays the only store; the file is a cache that every start rebuilds.

use std::{
    fs::{File, OpenOptions},
    io,
    os::unix::fs::FileExt,
    path::Path,
    sync::atomic::{AtomicU64, Ordering},
};

use hookline_common::wire::EntryStatus;

use super::build::{Meta, PackedPosition, StatusMeta};

/// The bytes of one entry on disk.
pub(super) const RECORD_BYTES: usize = 120;

/// At most this many entries per segment (7.5 MiB of records): a scan holds one segment at a time.
pub(super) const SEGMENT_ENTRIES: usize = 65_536;

/// One run of a partition's entries on disk, in offset order.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    pub(super) first_offset: i64,
    pub(super) last_offset: i64,
    pub(super) count: u32,
    /// Where its records start in the file; its blob (event ids, error messages) follows them.
    pub(super) at: u64,
    pub(super) blob_len: u32,
}

impl Segment {
    fn blob_at(&self) -> u64 {
        self.at + u64::from(self.count) * RECORD_BYTES as u64
    }
}

/// The spill file.
#[derive(Debug)]
pub(super) struct SpillFile {
    file: File,
    len: u64,
}

/// A segment read back: its records and its blob, in buffers a scan reuses.
#[derive(Debug, Default)]
pub(super) struct Loaded {
    records: Vec<u8>,
    pub(super) blob: Vec<u8>,
}

impl Loaded {
    pub(super) fn metas(&self) -> impl Iterator<Item = Meta> + '_ {
        self.records.chunks_exact(RECORD_BYTES).map(decode)
    }
}

impl SpillFile {
    /// A new, already unlinked, file in `dir`.
    pub(super) fn create(dir: &Path) -> io::Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "hookline-dlq-index-{}-{}-{}",
            std::process::id(),
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        std::fs::remove_file(&path)?;
        Ok(Self { file, len: 0 })
    }

    /// Bytes written so far.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Writes `metas` (one partition's, in offset order, their blob positions relative to `blob`) as a segment.
    pub(super) fn append(&mut self, metas: &[Meta], blob: &[u8]) -> io::Result<Segment> {
        let (Some(first), Some(last)) = (metas.first(), metas.last()) else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "an empty segment"));
        };
        let mut bytes = vec![0_u8; metas.len() * RECORD_BYTES + blob.len()];
        for (meta, record) in metas.iter().zip(bytes.chunks_exact_mut(RECORD_BYTES)) {
            encode(meta, record);
        }
        bytes[metas.len() * RECORD_BYTES..].copy_from_slice(blob);
        self.file.write_all_at(&bytes, self.len)?;
        let segment = Segment {
            first_offset: first.offset,
            last_offset: last.offset,
            count: u32::try_from(metas.len()).map_err(|_| io::Error::other("segment too large"))?,
            at: self.len,
            blob_len: u32::try_from(blob.len()).map_err(|_| io::Error::other("segment blob too large"))?,
        };
        self.len += bytes.len() as u64;
        Ok(segment)
    }

    /// Reads a whole segment into `into`.
    pub(super) fn load(&self, segment: &Segment, into: &mut Loaded) -> io::Result<()> {
        into.records.resize(segment.count as usize * RECORD_BYTES, 0);
        self.file.read_exact_at(&mut into.records, segment.at)?;
        into.blob.resize(segment.blob_len as usize, 0);
        self.file.read_exact_at(&mut into.blob, segment.blob_at())
    }

    /// The entry at `offset` in `segment`, if one is there: its index in the segment and the entry (a binary
    /// search reading one record per step).
    pub(super) fn find(&self, segment: &Segment, offset: i64) -> io::Result<Option<(u32, Meta)>> {
        let (mut low, mut high) = (0_u32, segment.count);
        let mut record = [0_u8; RECORD_BYTES];
        while low < high {
            let middle = low + (high - low) / 2;
            self.file.read_exact_at(&mut record, segment.at + u64::from(middle) * RECORD_BYTES as u64)?;
            let meta = decode(&record);
            match meta.offset.cmp(&offset) {
                std::cmp::Ordering::Equal => return Ok(Some((middle, meta))),
                std::cmp::Ordering::Less => low = middle + 1,
                std::cmp::Ordering::Greater => high = middle,
            }
        }
        Ok(None)
    }

    /// `len` bytes of a segment's blob from `start`.
    pub(super) fn blob(&self, segment: &Segment, start: u32, len: u32) -> io::Result<Vec<u8>> {
        let len = len.min(segment.blob_len.saturating_sub(start));
        let mut bytes = vec![0_u8; len as usize];
        self.file.read_exact_at(&mut bytes, segment.blob_at() + u64::from(start))?;
        Ok(bytes)
    }

    /// Rewrites the `index`th entry of `segment` (a status applied to an entry on disk).
    pub(super) fn rewrite(&self, segment: &Segment, index: u32, meta: &Meta) -> io::Result<()> {
        let mut record = [0_u8; RECORD_BYTES];
        encode(meta, &mut record);
        self.file.write_all_at(&record, segment.at + u64::from(index) * RECORD_BYTES as u64)
    }
}

fn status_code(status: EntryStatus) -> u8 {
    match status {
        EntryStatus::Replayed => 1,
        EntryStatus::ReplayFailed => 2,
        EntryStatus::Succeeded => 3,
        EntryStatus::FailedAgain => 4,
        EntryStatus::Discarded => 5,
    }
}

fn status_of_code(code: u8) -> Option<EntryStatus> {
    Some(match code {
        1 => EntryStatus::Replayed,
        2 => EntryStatus::ReplayFailed,
        3 => EntryStatus::Succeeded,
        4 => EntryStatus::FailedAgain,
        5 => EntryStatus::Discarded,
        _ => return None,
    })
}

/// Little-endian fields in a fixed order.
struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        self.out[self.at..self.at + bytes.len()].copy_from_slice(bytes);
        self.at += bytes.len();
    }

    fn position(&mut self, position: PackedPosition) {
        self.put(&position.partition.to_le_bytes());
        self.put(&position.offset_low.to_le_bytes());
        self.put(&position.offset_high.to_le_bytes());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0_u8; N];
        out.copy_from_slice(&self.bytes[self.at..self.at + N]);
        self.at += N;
        out
    }

    fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.take())
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    fn i32(&mut self) -> i32 {
        i32::from_le_bytes(self.take())
    }

    fn position(&mut self) -> PackedPosition {
        PackedPosition { partition: self.i32(), offset_low: self.u32(), offset_high: self.u32() }
    }
}

/// An entry as [`RECORD_BYTES`] bytes (118 used).
pub(super) fn encode(meta: &Meta, out: &mut [u8]) {
    let mut writer = Writer { out, at: 0 };
    writer.put(&meta.offset.to_le_bytes());
    for number in [
        meta.event_id_at,
        meta.event_id_len,
        meta.source,
        meta.event_type,
        meta.error_class,
        meta.error,
        meta.origin,
        meta.body_bytes,
        meta.replays,
    ] {
        writer.put(&number.to_le_bytes());
    }
    writer.put(&meta.original_partition.to_le_bytes());
    writer.put(&meta.attempts.to_le_bytes());
    // One byte of flags: bit 0 unverified, bit 1 by reference.
    writer.put(&[u8::from(meta.unverified) | (u8::from(meta.by_reference) << 1)]);
    for number in [meta.original_offset, meta.first_failure_at_ms, meta.last_failure_at_ms] {
        writer.put(&number.to_le_bytes());
    }
    writer.position(meta.replay_of);
    match meta.status {
        None => writer.put(&[0]),
        Some(status) => {
            writer.put(&[status_code(status.status)]);
            writer.put(&status.at_ms.to_le_bytes());
            writer.put(&status.by.to_le_bytes());
            writer.put(&status.note.to_le_bytes());
            writer.position(status.new_entry);
        }
    }
}

pub(super) fn decode(bytes: &[u8]) -> Meta {
    let mut reader = Reader { bytes, at: 0 };
    let offset = reader.i64();
    let [event_id_at, event_id_len, source, event_type, error_class, error, origin, body_bytes, replays] =
        std::array::from_fn(|_| reader.u32());
    let original_partition = reader.i32();
    let attempts = u16::from_le_bytes(reader.take());
    let [flags] = reader.take::<1>();
    let [original_offset, first_failure_at_ms, last_failure_at_ms] = std::array::from_fn(|_| reader.i64());
    let replay_of = reader.position();
    let [code] = reader.take::<1>();
    let status = status_of_code(code).map(|status| StatusMeta {
        status,
        at_ms: reader.i64(),
        by: reader.u32(),
        note: reader.u32(),
        new_entry: reader.position(),
    });
    Meta {
        offset,
        event_id_at,
        event_id_len,
        source,
        event_type,
        error_class,
        error,
        origin,
        original_partition,
        attempts,
        unverified: flags & 1 != 0,
        by_reference: flags & 2 != 0,
        original_offset,
        first_failure_at_ms,
        last_failure_at_ms,
        body_bytes,
        replays,
        replay_of,
        status,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::Position;

    fn meta(offset: i64, status: Option<StatusMeta>) -> Meta {
        Meta {
            event_id_at: 7,
            event_id_len: 3,
            source: 1,
            event_type: 2,
            error_class: 3,
            error: 4 | super::super::build::INLINE_ERROR,
            origin: 5,
            original_partition: 6,
            attempts: 7,
            unverified: true,
            by_reference: true,
            original_offset: 8,
            first_failure_at_ms: 9,
            last_failure_at_ms: 10,
            body_bytes: 11,
            replays: 12,
            replay_of: PackedPosition::pack(Some(Position { partition: 2, offset: 5_000_000_000 })),
            status,
            ..Meta::empty(offset)
        }
    }

    #[test]
    fn entries_round_trip_through_their_records_and_are_found_by_offset() {
        let status = StatusMeta {
            status: EntryStatus::FailedAgain,
            at_ms: 13,
            by: 14,
            note: 15,
            new_entry: PackedPosition::pack(Some(Position { partition: 1, offset: 16 })),
        };
        let metas: Vec<Meta> = (0..100).map(|n| meta(n * 3, (n % 2 == 0).then_some(status))).collect();
        let mut file = SpillFile::create(&std::env::temp_dir()).unwrap();
        let first = file.append(&metas[..1], b"x").unwrap();
        let segment = file.append(&metas, b"abcdefghij").unwrap();
        assert_eq!((first.count, segment.count, segment.first_offset, segment.last_offset), (1, 100, 0, 297));
        let mut loaded = Loaded::default();
        file.load(&segment, &mut loaded).unwrap();
        assert_eq!(loaded.blob, b"abcdefghij");
        let read: Vec<Meta> = loaded.metas().collect();
        assert_eq!(format!("{read:?}"), format!("{metas:?}"));
        assert_eq!(file.blob(&segment, 7, 3).unwrap(), b"hij");
        let (index, found) = file.find(&segment, 33).unwrap().expect("offset 33");
        assert_eq!((index, found.offset, found.status.is_none()), (11, 33, true));
        assert!(file.find(&segment, 34).unwrap().is_none());
        let changed = Meta { status: Some(status), replays: 99, ..found };
        file.rewrite(&segment, index, &changed).unwrap();
        assert_eq!(file.find(&segment, 33).unwrap().expect("offset 33").1.replays, 99);
    }
}
