//! What a record's headers claim, read one claim at a time and believed by no one: for the readers that look at a
//! record before decoding it as its kind, or instead (a record whose MAC was refused, one no gateway wrote, one a
//! service passes on unread, a record of any kind whose trace context a reader continues). Each claim is the
//! first header of its name, as text: absent when the record has none, when its value is null, or when it is not
//! UTF-8. A reader that believes a record decodes it as its kind instead ([`crate::inbound::InboundRecord`],
//! [`crate::retry::RetryHeaders`], ...).

use crate::{
    header,
    table::{Header, first_text},
};

/// A record's headers, read for what they claim (see the module's documentation). Cheap: it holds the headers'
/// iterator and scans it once per claim asked for.
#[derive(Debug, Clone)]
pub struct Claims<I> {
    headers: I,
}

impl<'a, I: Iterator<Item = Header<'a>> + Clone> Claims<I> {
    /// The claims of a record with these headers, in record order.
    pub fn of(headers: I) -> Self {
        Self { headers }
    }

    fn text(&self, name: &'static str) -> Option<String> {
        first_text(self.headers.clone(), name).and_then(Result::ok)
    }

    /// The source it names ([`header::SOURCE`]).
    pub fn source(&self) -> Option<String> {
        self.text(header::SOURCE)
    }

    /// The event id it names ([`header::EVENT_ID`]).
    pub fn event_id(&self) -> Option<String> {
        self.text(header::EVENT_ID)
    }

    /// The one consumer service it is addressed to ([`header::SERVICE`]), if any.
    pub fn service(&self) -> Option<String> {
        self.text(header::SERVICE)
    }

    /// The DLQ entry it re-drives ([`header::REPLAY_OF`]), if any.
    pub fn replay_of(&self) -> Option<String> {
        self.text(header::REPLAY_OF)
    }

    /// How many times that entry has been re-driven ([`header::REPLAY_COUNT`]), when it is a number.
    pub fn replay_count(&self) -> Option<u32> {
        self.text(header::REPLAY_COUNT).and_then(|count| count.parse().ok())
    }

    /// Where the record a re-processing request re-processes was ([`header::REPROCESS_OF`]), if it is one.
    pub fn reprocess_of(&self) -> Option<String> {
        self.text(header::REPROCESS_OF)
    }

    /// The provider's own event id ([`header::PROVIDER_EVENT_ID`]), if any.
    pub fn provider_event_id(&self) -> Option<String> {
        self.text(header::PROVIDER_EVENT_ID)
    }

    /// The W3C trace context of the span that sent it ([`header::TRACEPARENT`], written by
    /// [`crate::Outgoing::set_traceparent`]), as its bytes: the first of the name, `None` when absent or null.
    pub fn traceparent(&self) -> Option<&'a [u8]> {
        self.headers.clone().find(|h| h.name == header::TRACEPARENT)?.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HeaderTable;

    #[test]
    fn a_claim_is_the_first_text_of_its_name() {
        let mut table = HeaderTable::new();
        table.push(header::SERVICE, None);
        table.push(header::SERVICE, Some(b"billing"));
        table.push(header::SOURCE, Some(b"github"));
        table.push(header::SOURCE, Some(b"stripe"));
        table.push(header::EVENT_ID, Some(&[0xff]));
        table.push(header::REPLAY_COUNT, Some(b"three"));
        table.push(header::REPLAY_OF, Some(b"webhooks.dlq:0:7"));
        table.push(header::TRACEPARENT, Some(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"));
        let claims = Claims::of(table.iter());
        assert_eq!(claims.service(), None, "a null first value is absent, as it was for every reader");
        assert_eq!(claims.source().as_deref(), Some("github"), "the first of the name");
        assert_eq!(claims.event_id(), None, "not UTF-8");
        assert_eq!(claims.replay_count(), None, "not a number");
        assert_eq!(claims.replay_of().as_deref(), Some("webhooks.dlq:0:7"));
        assert_eq!((claims.reprocess_of(), claims.provider_event_id()), (None, None));
        assert_eq!(claims.traceparent(), Some(&b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"[..]));
        let mut outgoing = crate::Outgoing::new("t", None, None, HeaderTable::new());
        outgoing.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00");
        outgoing.set_traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(
            Claims::of(outgoing.headers.iter()).traceparent(),
            Some(&b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"[..]),
            "what a writer sets is what a reader reads"
        );
    }
}
