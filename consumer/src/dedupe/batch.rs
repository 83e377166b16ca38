//! Round trips coalesced on a single Redis: every script call (claim, done, release, renew, dead) of any record
//! goes through one batching task, which sends whatever calls are waiting as one pipeline (up to [`MAX_BATCH`], a
//! few pipelines in flight at once) and hands each caller its own reply. Each call is still the same script with
//! the same reply, so the rules hold call by call; a failed pipeline fails every call in it, and each caller
//! retries on its own. On a Redis Cluster, calls go one by one to their slot's node.

use redis::{RedisResult, aio::ConnectionManager};

use super::{ClaimToken, Dedupe, Op};

/// Script calls sent in one pipeline, at most.
pub const MAX_BATCH: usize = 256;
/// Pipelines in flight at once; while they are, new calls gather into the next one.
const BATCHES_IN_FLIGHT: usize = 4;

/// One script call waiting for the batching task.
#[derive(Debug)]
pub(super) struct Call {
    pub(super) op: Op,
    pub(super) token: ClaimToken,
    pub(super) reply: tokio::sync::oneshot::Sender<RedisResult<redis::Value>>,
}

/// The batching task: takes every call waiting, sends them as one pipeline, answers each. Ends when every
/// [`Dedupe`] clone is gone. The pipeline starts by loading the scripts it runs, so a Redis that restarted (and lost
/// its script cache) needs no special case.
pub(super) async fn batch_calls(
    mut receiver: tokio::sync::mpsc::UnboundedReceiver<Call>,
    connection: ConnectionManager,
    dedupe: Dedupe,
) {
    // The task's own clone must not keep the queue open.
    let dedupe = Dedupe { batcher: None, ..dedupe };
    let slots = std::sync::Arc::new(tokio::sync::Semaphore::new(BATCHES_IN_FLIGHT));
    while let Some(first) = receiver.recv().await {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        // Calls that arrived while waiting for a slot join this batch.
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match receiver.try_recv() {
                Ok(call) => batch.push(call),
                Err(_) => break,
            }
        }
        let (mut connection, dedupe) = (connection.clone(), dedupe.clone());
        tokio::spawn(async move {
            let mut pipeline = redis::pipe();
            pipeline.ignore_errors();
            // The scripts this batch runs, loaded first (a Redis that restarted lost its script cache).
            let mut scripts: Vec<&redis::Script> = Vec::new();
            for call in &batch {
                let script = dedupe.script_of(&call.op);
                if !scripts.iter().any(|loaded| loaded.get_hash() == script.get_hash()) {
                    scripts.push(script);
                }
            }
            for script in &scripts {
                pipeline.load_script(script);
            }
            for call in &batch {
                pipeline.invoke_script(&dedupe.invocation(&call.op, &call.token));
            }
            let result: RedisResult<Vec<redis::Value>> = pipeline.query_async(&mut connection).await;
            match result {
                Ok(values) if values.len() == batch.len() + scripts.len() => {
                    for (call, value) in batch.into_iter().zip(values.into_iter().skip(scripts.len())) {
                        let _ = call.reply.send(value.extract_error());
                    }
                }
                Ok(_) => {
                    let error = redis::RedisError::from(std::io::Error::other("pipeline reply count mismatch"));
                    batch.into_iter().for_each(|call| drop(call.reply.send(Err(error.clone()))));
                }
                Err(error) => batch.into_iter().for_each(|call| drop(call.reply.send(Err(error.clone())))),
            }
            drop(slot);
        });
    }
}
