//! The handler the in-process consumers of a [`crate::TestStack`] run: it records every call and every success,
//! and fails on demand.

use std::{
    collections::{HashMap, HashSet, VecDeque},
    sync::Mutex,
    time::Duration,
};

use hookline_common::wire::InboundEvent;
use hookline_consumer::handler::{BoxFuture, Handler, HandlerError};

/// A handler for tests: records every call and every success, and fails on demand.
#[derive(Debug, Default)]
pub struct TestHandler {
    state: Mutex<TestHandlerState>,
}

#[derive(Debug, Default)]
struct TestHandlerState {
    calls: Vec<InboundEvent>,
    successes: Vec<InboundEvent>,
    /// Errors to return, in order, for an event id before it succeeds.
    scripted: HashMap<String, VecDeque<HandlerError>>,
    /// Event ids that always fail as poison.
    poison: HashSet<String>,
    delay: Duration,
    /// Per event id: how long its calls take, instead of `delay`.
    event_delays: HashMap<String, Duration>,
    /// Calls in the handler right now, and the most seen at once.
    in_handler: usize,
    max_in_handler: usize,
}

impl TestHandler {
    fn lock(&self) -> std::sync::MutexGuard<'_, TestHandlerState> {
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Every call, failed or not.
    pub fn calls(&self) -> Vec<InboundEvent> {
        self.lock().calls.clone()
    }

    /// Every successful call.
    pub fn successes(&self) -> Vec<InboundEvent> {
        self.lock().successes.clone()
    }

    /// How many times the event with this id was processed successfully.
    pub fn count(&self, event_id: &str) -> usize {
        self.lock().successes.iter().filter(|event| event.meta.event_id == event_id).count()
    }

    /// How many times the handler was called for this event id.
    pub fn attempts(&self, event_id: &str) -> usize {
        self.lock().calls.iter().filter(|event| event.meta.event_id == event_id).count()
    }

    /// The next calls for `event_id` return these errors, in order; then it succeeds.
    pub fn fail_with(&self, event_id: &str, errors: impl IntoIterator<Item = HandlerError>) {
        self.lock().scripted.entry(event_id.to_owned()).or_default().extend(errors);
    }

    /// Every call for `event_id` fails as poison.
    pub fn poison(&self, event_id: &str) {
        self.lock().poison.insert(event_id.to_owned());
    }

    /// Calls for `event_id` succeed again (the downstream bug is fixed, or it is back up): no more poison, and
    /// the failures still scripted for it are dropped.
    pub fn heal(&self, event_id: &str) {
        let mut state = self.lock();
        state.poison.remove(event_id);
        state.scripted.remove(event_id);
    }

    /// Every call takes this long before it answers.
    pub fn set_delay(&self, delay: Duration) {
        self.lock().delay = delay;
    }

    /// Calls for `event_id` take this long (instead of the common delay).
    pub fn delay_event(&self, event_id: &str, delay: Duration) {
        self.lock().event_delays.insert(event_id.to_owned(), delay);
    }

    /// The most calls that were in the handler at the same time.
    pub fn max_concurrent_calls(&self) -> usize {
        self.lock().max_in_handler
    }
}

impl Handler for TestHandler {
    fn name(&self) -> &str {
        "test"
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        Box::pin(async move {
            let delay = {
                let mut state = self.lock();
                state.calls.push(event.clone());
                state.in_handler += 1;
                state.max_in_handler = state.max_in_handler.max(state.in_handler);
                state.event_delays.get(&event.meta.event_id).copied().unwrap_or(state.delay)
            };
            tokio::time::sleep(delay).await;
            let mut state = self.lock();
            state.in_handler -= 1;
            let id = &event.meta.event_id;
            if state.poison.contains(id) {
                return Err(HandlerError::poison(format!("test poison for {id}")));
            }
            if let Some(error) = state.scripted.get_mut(id).and_then(VecDeque::pop_front) {
                return Err(error);
            }
            state.successes.push(event.clone());
            Ok(())
        })
    }
}

/// The consumer's router built from `config` (its `[[routes]]` and its `[sources]` rules: allowlists, JSON,
/// schemas), with `handler` for every event no route takes: for tests of what the rules decide, which
/// [`crate::TestStack`]'s plain test handler (handed every event, no rules) would not see.
pub fn routed(
    handler: &std::sync::Arc<TestHandler>,
    config: &hookline_consumer::ConsumerConfig,
) -> std::sync::Arc<dyn Handler> {
    let mut router = hookline_consumer::handler::router::Router::new(
        &config.handler,
        &config.routes,
        &config.sources,
        &config.config_dir,
    )
    .expect("a valid router");
    router.set_default(Box::new(Shared(handler.clone())));
    std::sync::Arc::new(router)
}

/// A [`TestHandler`] shared with the test that inspects it, as a router's default handler.
#[derive(Debug)]
struct Shared(std::sync::Arc<TestHandler>);

impl Handler for Shared {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn handle<'a>(&'a self, event: &'a InboundEvent) -> BoxFuture<'a, Result<(), HandlerError>> {
        self.0.handle(event)
    }
}
