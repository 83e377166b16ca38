//! An example of the transactional Rust API (`hookline_consumer::handler::postgres::work`): a payment webhook
//! (`{"order": "o1", "amount": 10}`) moves its order from `pending` to `paid`, guarded by the current state, in the
//! same transaction as the event's dedupe row. So the payment is applied exactly once, whatever crashes, and:
//! - an order already past `pending` is a state the event has nothing to do in: `skipped`, recorded;
//! - an order that does not exist yet (providers do not keep order) is retried, then dead-lettered;
//! - a body without an order id is poison.
//!
//! The tables it expects are in [`SCHEMA_SQL`]; `src/main.rs` is the binary.

use hookline_common::wire::InboundEvent;
use hookline_consumer::handler::{
    BoxFuture, HandlerError,
    postgres::work::{Effect, TransactionalHandler, WorkError},
};

/// The example's own table, which the user owns (the dedupe table comes from `orders-consumer migrate`).
pub const SCHEMA_SQL: &str = "CREATE TABLE IF NOT EXISTS orders (
    id     text PRIMARY KEY,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'paid', 'refunded')),
    paid   bigint
)";

const PAY: &str = "UPDATE orders SET status = 'paid', paid = $2 WHERE id = $1 AND status = 'pending'";
const EXISTS: &str = "SELECT status FROM orders WHERE id = $1";

#[derive(Debug, Default)]
pub struct PayOrder;

impl TransactionalHandler for PayOrder {
    fn prepare<'a>(&'a self, client: &'a tokio_postgres::Client) -> BoxFuture<'a, Result<(), tokio_postgres::Error>> {
        // A missing table or column stops the consumer at start, not at the first payment.
        Box::pin(async move {
            client.prepare(PAY).await?;
            client.prepare(EXISTS).await?;
            Ok(())
        })
    }

    fn apply<'a>(
        &'a self,
        transaction: &'a tokio_postgres::Transaction<'a>,
        event: &'a InboundEvent,
    ) -> BoxFuture<'a, Result<Effect, WorkError>> {
        Box::pin(async move {
            let body: serde_json::Value = serde_json::from_slice(&event.body)
                .map_err(|error| HandlerError::poison(format!("body is not JSON: {error}")))?;
            let order = body["order"].as_str().ok_or_else(|| HandlerError::poison("no `order` in the body"))?;
            let amount = body["amount"].as_i64().ok_or_else(|| HandlerError::poison("no integer `amount`"))?;
            let paid = transaction.execute(PAY, &[&order, &amount]).await?;
            if paid == 1 {
                return Ok(Effect::applied(vec![1]));
            }
            match transaction.query_opt(EXISTS, &[&order]).await? {
                // Already paid or refunded: nothing to do, and a re-delivery is a duplicate.
                Some(_) => Ok(Effect::skipped(vec![0])),
                None => Err(HandlerError::retryable(format!("order {order} does not exist yet")).into()),
            }
        })
    }
}
