//! One owned header table: a record's headers in record order, every name in one string and every value in one
//! buffer. Writers build a record's headers in it once ([`crate::Outgoing`]); the consumer's and the replayer's
//! doors copy a fetched record's headers into it once; every reader of this crate reads it.

/// One header of a table, borrowed: its name and its value (`None`: a null value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header<'a> {
    pub name: &'a str,
    pub value: Option<&'a [u8]>,
}

/// A record's headers, owned, in record order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeaderTable {
    names: String,
    values: Vec<u8>,
    entries: Vec<Entry>,
}

/// Where one header lives in the table's buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    name: (u32, u32),
    /// `None`: a null value.
    value: Option<(u32, u32)>,
}

impl HeaderTable {
    pub const fn new() -> Self {
        Self { names: String::new(), values: Vec::new(), entries: Vec::new() }
    }

    /// A table with room for `count` headers.
    pub fn with_capacity(count: usize) -> Self {
        Self { names: String::with_capacity(count * 24), values: Vec::new(), entries: Vec::with_capacity(count) }
    }

    /// Copies `headers` into one table, buffers sized once.
    pub fn copy_of<'a>(headers: impl Iterator<Item = Header<'a>> + Clone) -> Self {
        let mut table = Self::with_capacity(headers.clone().count());
        table.values.reserve_exact(headers.clone().map(|header| header.value.map_or(0, <[u8]>::len)).sum());
        for header in headers {
            table.push(header.name, header.value);
        }
        table
    }

    /// Appends one header.
    pub fn push(&mut self, name: &str, value: Option<&[u8]>) {
        let name_start = offset(self.names.len());
        self.names.push_str(name);
        let value = value.map(|value| {
            let start = offset(self.values.len());
            self.values.extend_from_slice(value);
            (start, offset(self.values.len()))
        });
        self.entries.push(Entry { name: (name_start, offset(self.names.len())), value });
    }

    /// Appends one header with a text value.
    pub(crate) fn push_str(&mut self, name: &str, value: &str) {
        self.push(name, Some(value.as_bytes()));
    }

    /// Appends every header of `other` that `keep` keeps, in order.
    pub(crate) fn extend_from(&mut self, other: &Self, keep: impl Fn(&str) -> bool) {
        for header in other.iter().filter(|header| keep(header.name)) {
            self.push(header.name, header.value);
        }
    }

    /// How many headers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bytes of every name and value together (what a header costs a window), without a walk.
    pub fn byte_len(&self) -> usize {
        self.names.len() + self.values.len()
    }

    /// The header at `index`.
    pub fn get(&self, index: usize) -> Option<Header<'_>> {
        let entry = self.entries.get(index)?;
        Some(Header {
            name: self.names.get(entry.name.0 as usize..entry.name.1 as usize)?,
            value: entry.value.and_then(|(start, end)| self.values.get(start as usize..end as usize)),
        })
    }

    /// Every header, in record order.
    pub fn iter(&self) -> impl Iterator<Item = Header<'_>> + Clone {
        (0..self.entries.len()).filter_map(|index| self.get(index))
    }

    /// The table without the headers `drop` names (order kept).
    pub(crate) fn without(&self, drop: impl Fn(&str) -> bool) -> Self {
        let mut out = Self::with_capacity(self.len());
        out.extend_from(self, |name| !drop(name));
        out
    }
}

fn offset(len: usize) -> u32 {
    u32::try_from(len).expect("a record's headers are far below 4 GiB")
}

/// The first value of header `name` among `headers`, as text: `None` when absent (or null), an error when present
/// but not UTF-8. A reader's one way of reading a header by name.
pub(crate) fn first_text<'a>(
    headers: impl Iterator<Item = Header<'a>>,
    name: &'static str,
) -> Option<Result<String, crate::WireError>> {
    let value = headers.into_iter().find(|header| header.name == name)?.value?;
    Some(std::str::from_utf8(value).map(str::to_owned).map_err(|_| crate::WireError::BadHeader(name)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_keeps_order_nulls_and_repeats() {
        let mut table = HeaderTable::new();
        table.push("a", Some(b"1"));
        table.push("empty", None);
        table.push("zero", Some(b""));
        table.push("a", Some(b"2"));
        let read: Vec<(&str, Option<&[u8]>)> = table.iter().map(|h| (h.name, h.value)).collect();
        assert_eq!(
            read,
            vec![("a", Some(&b"1"[..])), ("empty", None), ("zero", Some(&b""[..])), ("a", Some(&b"2"[..]))]
        );
        assert_eq!(table.get(9), None);
        assert_eq!(HeaderTable::copy_of(table.iter()), table);
        assert_eq!(table.without(|name| name == "a").len(), 2);
        assert_eq!(first_text(table.iter(), "a"), Some(Ok("1".to_owned())));
        assert_eq!(first_text(table.iter(), "empty"), None, "a null value reads as absent");
    }
}
