//! The memory a request may hold while it is read: its head, charged from when it arrives, and its body's
//! buffer, grown from what has arrived. Both are reserved from one shared [`BodyBudget`]
//! (`limits.max_body_buffer_bytes`), so neither slow bodies nor held HTTP/2 streams can take more than it.

use std::{sync::Arc, time::Duration};

use bytes::Bytes;
use http_body_util::BodyExt;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::Rejection;

/// The bytes of request bodies the gateway may hold at once, over all requests: each body reserves what its
/// buffer allocates, as it grows, and gives it back when the request ends.
#[derive(Debug)]
pub struct BodyBudget {
    bytes: Arc<Semaphore>,
}

impl BodyBudget {
    pub fn new(max_bytes: usize) -> Self {
        Self { bytes: Arc::new(Semaphore::new(max_bytes.min(Semaphore::MAX_PERMITS))) }
    }

    /// Bytes not reserved by any body now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }

    pub(crate) fn reserve(&self, n_bytes: usize) -> Result<OwnedSemaphorePermit, Rejection> {
        let n_bytes = u32::try_from(n_bytes).map_err(|_| Rejection::BodyBufferFull)?;
        self.bytes.clone().try_acquire_many_owned(n_bytes).map_err(|_| Rejection::BodyBufferFull)
    }
}

/// Smallest buffer a body starts with once its first bytes arrive.
const MIN_BODY_BUFFER_BYTES: usize = 4096;

/// Reads the whole body into one buffer, refusing it as soon as it is known to exceed `limit_bytes`: from
/// `Content-Length` before reading anything, and while streaming when there is none (or it lies).
///
/// Memory: the buffer is sized from what has arrived (doubling, from [`MIN_BODY_BUFFER_BYTES`]), never from what
/// the client declares, and never beyond `limit_bytes` or the declared length; each chunk is copied in and
/// dropped, so a body of one-byte chunks costs what a body of one chunk costs. Its capacity is at most
/// `min(limit_bytes, 2 x received + 4 KiB)` and is reserved from `budget` before it is allocated; the
/// reservation is returned with the bytes and must live as long as they do.
pub async fn read_body<B>(
    mut body: B,
    declared: Option<u64>,
    limit_bytes: usize,
    budget: &BodyBudget,
    deadline: Duration,
) -> Result<(Bytes, OwnedSemaphorePermit), Rejection>
where
    B: hyper::body::Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    if declared.is_some_and(|length| length > limit_bytes as u64) {
        return Err(Rejection::BodyTooLarge { limit_bytes });
    }
    let most = declared.map_or(limit_bytes, |length| usize::try_from(length).unwrap_or(limit_bytes).min(limit_bytes));
    let mut reservation = budget.reserve(0)?;
    let mut buffer: Vec<u8> = Vec::new();
    let collect = async {
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|error| Rejection::BodyRead(error.into()))?;
            let Ok(data) = frame.into_data() else { continue };
            let needed = buffer.len() + data.len();
            if needed > limit_bytes {
                return Err(Rejection::BodyTooLarge { limit_bytes });
            }
            if needed > buffer.capacity() {
                let grown = needed.max(buffer.capacity() * 2).max(MIN_BODY_BUFFER_BYTES).min(most.max(needed));
                reservation.merge(budget.reserve(grown - buffer.capacity())?);
                buffer.reserve_exact(grown - buffer.len());
            }
            buffer.extend_from_slice(&data);
        }
        Ok(())
    };
    match tokio::time::timeout(deadline, collect).await {
        Err(_elapsed) => Err(Rejection::BodyTimeout),
        Ok(Err(rejection)) => Err(rejection),
        Ok(Ok(())) => Ok((Bytes::from(buffer), reservation)),
    }
}

/// What a header costs in a header list beyond its name and value: the 32 bytes HTTP/2 counts per field
/// (RFC 9113, section 6.5.2, `SETTINGS_MAX_HEADER_LIST_SIZE`), about what a `HeaderMap` entry costs beside them.
pub const HEADER_OVERHEAD_BYTES: usize = 32;

/// The bytes a request head holds while the request is in progress: each header's name and value, plus
/// [`HEADER_OVERHEAD_BYTES`] a header, plus the request target.
pub fn head_bytes(uri: &http::Uri, headers: &http::HeaderMap) -> usize {
    let fields: usize =
        headers.iter().map(|(name, value)| name.as_str().len() + value.len() + HEADER_OVERHEAD_BYTES).sum();
    let target = uri.authority().map_or(0, |authority| authority.as_str().len())
        + uri.path_and_query().map_or(0, |path| path.as_str().len());
    fields + target + HEADER_OVERHEAD_BYTES
}

/// Reserves `head_bytes` of a request's head from `budget`, for as long as the request is in progress: so streams
/// that send a large head and never a body hold their heads against the same budget as bodies.
pub fn reserve_head(budget: &BodyBudget, head_bytes: usize) -> Result<OwnedSemaphorePermit, Rejection> {
    budget.reserve(head_bytes)
}

#[cfg(test)]
mod tests {
    use std::{
        pin::Pin,
        task::{Context, Poll},
    };

    use hyper::body::Frame;

    use super::*;

    /// A body that arrives in one-byte chunks, as an attacker sends it.
    struct OneByteChunks {
        remaining: usize,
    }

    impl hyper::body::Body for OneByteChunks {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            if self.remaining == 0 {
                return Poll::Ready(None);
            }
            self.remaining -= 1;
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))))
        }
    }

    const DEADLINE: Duration = Duration::from_secs(10);

    /// The documented bound: one buffer of at most `min(limit, 2 x received + 4 KiB)` bytes, all of it reserved
    /// from the shared budget and given back when the request ends.
    #[tokio::test]
    async fn one_byte_chunks_leave_memory_within_the_documented_bound() {
        let budget = BodyBudget::new(4 * 1024 * 1024);
        for (n_bytes, declared) in [(1, None), (5_000, None), (1_000_000, None), (777_777, Some(777_777))] {
            let body = OneByteChunks { remaining: n_bytes };
            let (bytes, reservation) = read_body(body, declared, 1_000_000, &budget, DEADLINE).await.unwrap();
            assert_eq!(bytes.len(), n_bytes);
            let reserved = reservation.num_permits();
            assert!(reserved >= n_bytes, "the buffer is reserved: {reserved} < {n_bytes}");
            assert!(reserved <= (2 * n_bytes + MIN_BODY_BUFFER_BYTES).min(1_000_000), "{n_bytes}: {reserved}");
            assert_eq!(budget.available(), 4 * 1024 * 1024 - reserved);
            drop((bytes, reservation));
            assert_eq!(budget.available(), 4 * 1024 * 1024, "given back");
        }
    }

    #[tokio::test]
    async fn a_declared_length_allocates_nothing_until_bytes_arrive() {
        let budget = BodyBudget::new(1024 * 1024);
        let (bytes, reservation) =
            read_body(OneByteChunks { remaining: 0 }, Some(1_000_000), 1_000_000, &budget, DEADLINE).await.unwrap();
        assert!(bytes.is_empty());
        assert_eq!(reservation.num_permits(), 0);
    }

    #[tokio::test]
    async fn bodies_past_the_limit_or_the_budget_are_refused() {
        let budget = BodyBudget::new(1024 * 1024);
        let too_large = read_body(OneByteChunks { remaining: 2_000 }, None, 1_000, &budget, DEADLINE).await;
        assert!(matches!(too_large, Err(Rejection::BodyTooLarge { limit_bytes: 1_000 })));
        let declared = read_body(OneByteChunks { remaining: 0 }, Some(1_001), 1_000, &budget, DEADLINE).await;
        assert!(matches!(declared, Err(Rejection::BodyTooLarge { .. })));
        assert_eq!(budget.available(), 1024 * 1024);

        let small = BodyBudget::new(10_000);
        let held = read_body(OneByteChunks { remaining: 6_000 }, None, 100_000, &small, DEADLINE).await.unwrap();
        let refused = read_body(OneByteChunks { remaining: 6_000 }, None, 100_000, &small, DEADLINE).await;
        assert!(matches!(refused, Err(Rejection::BodyBufferFull)));
        drop(held);
        assert_eq!(small.available(), 10_000, "a refused body gives back what it had reserved");
    }

    #[tokio::test]
    async fn a_head_is_charged_its_names_values_and_overhead_and_refused_past_the_budget() {
        let request = http::Request::post("/webhooks/github")
            .header("x-large", "v".repeat(60_000))
            .header("x-small", "1")
            .body(())
            .unwrap();
        let (parts, ()) = request.into_parts();
        let expected = "x-large".len()
            + 60_000
            + "x-small".len()
            + 1
            + 2 * HEADER_OVERHEAD_BYTES
            + "/webhooks/github".len()
            + HEADER_OVERHEAD_BYTES;
        assert_eq!(head_bytes(&parts.uri, &parts.headers), expected);

        let budget = BodyBudget::new(2 * expected + 10);
        let first = reserve_head(&budget, head_bytes(&parts.uri, &parts.headers)).unwrap();
        let second = reserve_head(&budget, head_bytes(&parts.uri, &parts.headers)).unwrap();
        assert!(matches!(
            reserve_head(&budget, head_bytes(&parts.uri, &parts.headers)),
            Err(Rejection::BodyBufferFull)
        ));
        let body = read_body(OneByteChunks { remaining: 11 }, None, 1_000, &budget, DEADLINE).await;
        assert!(matches!(body, Err(Rejection::BodyBufferFull)), "heads and bodies share the budget");
        drop((first, second));
        assert_eq!(budget.available(), 2 * expected + 10, "given back when the request ends");
    }
}
