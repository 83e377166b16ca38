//! Where the index's entries live: the newest in memory, the oldest on disk past the memory budget
//! ([`super::spill`]), and how an entry is found, changed, or scanned wherever it is.

use std::{borrow::Cow, collections::BTreeMap};

use super::{
    IndexError, Position,
    build::{INLINE_ERROR, Meta, Partition, State},
    spill::{Loaded, SEGMENT_ENTRIES, Segment, SpillFile},
};

/// Where [`State::locate`] found an entry.
enum Located<'a> {
    Memory(&'a Partition, usize),
    Disk(&'a Segment),
}

/// An entry, and the buffer its `event_id_at` points into.
pub(super) type WithBuffer<'a> = (Meta, Cow<'a, [u8]>);

impl State {
    /// Where the entry at `position` is: in memory (its index in `metas`), or on disk (its segment).
    fn locate(&self, position: Position) -> Option<Located<'_>> {
        let partition = self.partitions.get(&position.partition)?;
        if partition.metas.first().is_some_and(|first| first.offset <= position.offset) {
            let index = partition.metas.binary_search_by_key(&position.offset, |meta| meta.offset).ok()?;
            return Some(Located::Memory(partition, index));
        }
        let at = partition.cold.partition_point(|segment| segment.last_offset < position.offset);
        partition.cold.get(at).filter(|segment| segment.first_offset <= position.offset).map(Located::Disk)
    }

    /// The entry at `position`, copied (from disk, if it is there).
    pub(super) fn meta_at(&self, position: Position) -> Result<Option<Meta>, IndexError> {
        Ok(self.entry_at(position)?.map(|(meta, _)| meta))
    }

    /// The entry at `position` and its buffer (what its `event_id_at` points into: the partition's, or its
    /// segment's part from there).
    pub(super) fn entry_at(&self, position: Position) -> Result<Option<WithBuffer<'_>>, IndexError> {
        match self.locate(position) {
            None => Ok(None),
            Some(Located::Memory(partition, index)) => {
                Ok(Some((partition.metas[index], Cow::Borrowed(&partition.blob[..]))))
            }
            Some(Located::Disk(segment)) => {
                let Some(spill) = &self.spill else { return Ok(None) };
                let Some((_, mut meta)) = spill.find(segment, position.offset)? else { return Ok(None) };
                let error_len = if meta.error & INLINE_ERROR == 0 { 0 } else { meta.error & !INLINE_ERROR };
                let id_len = if meta.event_id_len == u32::MAX { 0 } else { meta.event_id_len };
                let blob = spill.blob(segment, meta.event_id_at, id_len + error_len)?;
                meta.event_id_at = 0;
                Ok(Some((meta, Cow::Owned(blob))))
            }
        }
    }

    /// Changes the entry at `position` (in memory, or rewritten on disk); whether there was one.
    pub(super) fn update(&mut self, position: Position, change: impl FnOnce(&mut Meta)) -> Result<bool, IndexError> {
        let disk = match self.locate(position) {
            None => return Ok(false),
            Some(Located::Memory(_, index)) => {
                let Some(partition) = self.partitions.get_mut(&position.partition) else { return Ok(false) };
                change(&mut partition.metas[index]);
                return Ok(true);
            }
            Some(Located::Disk(segment)) => *segment,
        };
        let Some(spill) = &self.spill else { return Ok(false) };
        let Some((index, mut meta)) = spill.find(&disk, position.offset)? else { return Ok(false) };
        change(&mut meta);
        spill.rewrite(&disk, index, &meta)?;
        Ok(true)
    }

    /// Calls `visit` with every entry in (partition, offset) order, and the buffer its `event_id_at` points into,
    /// until it returns false. Entries on disk are read one segment at a time.
    pub(super) fn scan(&self, visit: impl FnMut(i32, &Meta, &[u8]) -> bool) -> Result<(), IndexError> {
        self.scan_after(None, visit)
    }

    /// [`Self::scan`] from the first entry after `after` (a segment on disk that ends before it is not read).
    pub(super) fn scan_after(
        &self,
        after: Option<Position>,
        mut visit: impl FnMut(i32, &Meta, &[u8]) -> bool,
    ) -> Result<(), IndexError> {
        let mut loaded = Loaded::default();
        let (first_partition, past) = after.map_or((i32::MIN, None), |after| (after.partition, Some(after)));
        for (&number, partition) in self.partitions.range(first_partition..) {
            // Within `after`'s partition, only the offsets past it.
            let from = past.filter(|past| past.partition == number).map(|past| past.offset);
            for segment in &partition.cold {
                if from.is_some_and(|from| segment.last_offset <= from) {
                    continue;
                }
                let Some(spill) = &self.spill else { break };
                spill.load(segment, &mut loaded)?;
                for meta in loaded.metas().filter(|meta| from.is_none_or(|from| meta.offset > from)) {
                    if !visit(number, &meta, &loaded.blob) {
                        return Ok(());
                    }
                }
            }
            let start = from.map_or(0, |from| partition.metas.partition_point(|meta| meta.offset <= from));
            for meta in &partition.metas[start..] {
                if !visit(number, meta, &partition.blob) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The last offset added per partition: what a bulk action started now covers.
    pub(super) fn ends(&self) -> BTreeMap<i32, i64> {
        self.partitions.iter().filter_map(|(number, partition)| Some((*number, partition.last_offset?))).collect()
    }

    /// Past the budget, moves the oldest entries in memory to disk, a segment at a time from the partition with
    /// the most in memory, until the index is within three quarters of its budget (or nothing is left to move).
    pub(super) fn enforce_budget(&mut self) {
        if self.spill_failed || self.memory_bytes() <= self.budget.memory_bytes {
            return;
        }
        let target = self.budget.memory_bytes / 4 * 3;
        while self.memory_bytes() > target {
            let largest = self
                .partitions
                .iter()
                .filter(|(_, partition)| !partition.metas.is_empty())
                .max_by_key(|(_, partition)| partition.metas.len())
                .map(|(number, _)| *number);
            let Some(number) = largest else { break };
            if let Err(error) = self.spill_oldest(number) {
                tracing::error!(
                    error = %error,
                    dir = %self.budget.spill_dir.display(),
                    "the dead-letter index could not move entries to disk: it stays in memory, past its budget"
                );
                self.spill_failed = true;
                break;
            }
        }
    }

    /// Moves up to [`SEGMENT_ENTRIES`] of the oldest entries of `number` in memory to a new segment on disk.
    fn spill_oldest(&mut self, number: i32) -> std::io::Result<()> {
        if self.spill.is_none() {
            self.spill = Some(SpillFile::create(&self.budget.spill_dir)?);
        }
        let (Some(spill), Some(partition)) = (self.spill.as_mut(), self.partitions.get_mut(&number)) else {
            return Ok(());
        };
        let n = partition.metas.len().min(SEGMENT_ENTRIES);
        let cut = partition.metas.get(n).map_or(partition.blob.len(), |next| next.event_id_at as usize);
        let segment = spill.append(&partition.metas[..n], &partition.blob[..cut])?;
        partition.cold.push(segment);
        partition.metas.drain(..n);
        partition.metas.shrink_to(partition.metas.len() + partition.metas.len() / 8);
        partition.blob.drain(..cut);
        partition.blob.shrink_to(partition.blob.len() + partition.blob.len() / 8);
        let cut = cut as u32;
        for meta in &mut partition.metas {
            meta.event_id_at -= cut;
        }
        self.n_spilled += n;
        Ok(())
    }
}
