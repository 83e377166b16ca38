//! Between the `record` crate's types and librdkafka's: the one place a record's headers cross into or out of the
//! Kafka client. Writers hand the producer an [`Outgoing`], which becomes librdkafka headers once
//! ([`owned_headers`]); readers read a fetched record's headers through [`headers_of`] (no copy) or copy them into
//! a [`HeaderTable`] once ([`table_of`]).

use bytes::Bytes;
use hookline_record::{Header, HeaderTable, Outgoing};
use rdkafka::message::{Header as KafkaHeader, Headers, OwnedHeaders};

/// The headers of a librdkafka record as the `record` crate reads them, in record order, without a copy.
pub fn headers_of<H: Headers>(headers: Option<&H>) -> impl Iterator<Item = Header<'_>> + Clone {
    headers.into_iter().flat_map(|headers| {
        (0..headers.count())
            .filter_map(move |index| headers.try_get(index))
            .map(|header| Header { name: header.key, value: header.value })
    })
}

/// A librdkafka record's headers copied into one table.
pub fn table_of<H: Headers>(headers: Option<&H>) -> HeaderTable {
    HeaderTable::copy_of(headers_of(headers))
}

/// `table` as librdkafka headers: the one conversion a written record's headers go through.
pub fn owned_headers(table: &HeaderTable) -> OwnedHeaders {
    table.iter().fold(OwnedHeaders::new_with_capacity(table.len()), |out, h| {
        out.insert(KafkaHeader { key: h.name, value: h.value })
    })
}

/// A record given as librdkafka parts, as an [`Outgoing`].
pub fn outgoing(topic: &str, key: Option<&[u8]>, payload: Option<&[u8]>, headers: Option<&OwnedHeaders>) -> Outgoing {
    Outgoing::new(topic, key.map(Bytes::copy_from_slice), payload.map(Bytes::copy_from_slice), table_of(headers))
}
