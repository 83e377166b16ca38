//! Reliability where users outgrow one broker: the real services against a three-node KRaft cluster
//! (`scripts/stack up --brokers 3`: replication factor 3, `min.insync.replicas` 2), losing brokers to real
//! SIGKILLs under continuous load. What each test holds: every 2xx is in the topic afterwards, the gateway answers
//! only 202, or 503 with `Retry-After`, while brokers are missing, and what is acknowledged is processed once.
//!
//! The cluster costs three JVMs, so the first test of this binary starts it and the last one stops it; the tests
//! take turns, since each kills brokers. The recovery times they print are reports, not assertions.

use std::{
    collections::HashSet,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use hookline_common::config::KafkaConfig;
use hookline_tests::{Delivery, TEST_SECRET, TestStack, cluster_brokers, eventually, stack_script_args};
use http::{Request, StatusCode};
use http_body_util::Full;
use hyper_util::{client::legacy::Client, rt::TokioExecutor};
use rdkafka::{
    Message,
    consumer::{BaseConsumer, Consumer},
};

const N_TESTS: usize = 3;
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
static FINISHED: AtomicUsize = AtomicUsize::new(0);

/// This test's turn with the cluster: brings every node up (starting the cluster, or a node a failed test left
/// down); the last test to end stops the cluster.
struct ClusterTurn {
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

async fn cluster_turn() -> ClusterTurn {
    let turn = TURN.lock().await;
    run_stack(&["up", "--brokers", "3"]).await;
    ClusterTurn { _turn: turn }
}

impl Drop for ClusterTurn {
    fn drop(&mut self) {
        if FINISHED.fetch_add(1, Ordering::SeqCst) + 1 == N_TESTS {
            // Killed, not stopped: a KRaft node shut down after the others waits for a quorum that is gone, and
            // the data is this binary's scratch (purged, so the next run starts clean).
            stack_script_args(&["stop-broker", "1", "2", "3", "--kill"]);
            stack_script_args(&["down", "--brokers", "3", "--purge"]);
        }
    }
}

/// `scripts/stack` off the runtime, so the services keep running while a broker starts or stops.
async fn run_stack(args: &[&str]) {
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || stack_script_args(&args.iter().map(String::as_str).collect::<Vec<_>>()))
        .await
        .expect("scripts/stack");
}

/// The node leading each partition of `topic`.
fn leaders(brokers: &str, topic: &str) -> Vec<i32> {
    let kafka = KafkaConfig { brokers: brokers.to_owned(), ..KafkaConfig::default() };
    let consumer: BaseConsumer =
        hookline_common::kafka::client_config(&kafka, &[("group.id", "hookline-cluster-probe")])
            .create()
            .expect("probe client");
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(10)).expect("metadata");
    let topic = metadata.topics().iter().find(|t| t.name() == topic).expect("topic in metadata");
    let mut partitions: Vec<_> = topic.partitions().iter().map(|p| (p.id(), p.leader())).collect();
    partitions.sort_unstable();
    partitions.into_iter().map(|(_, leader)| leader).collect()
}

/// The node that leads most partitions of `topic`.
fn busiest_leader(brokers: &str, topic: &str) -> i32 {
    let leaders = leaders(brokers, topic);
    let count = |node: &i32| leaders.iter().filter(|leader| *leader == node).count();
    *leaders.iter().max_by_key(|node| count(node)).expect("partitions")
}

/// The node hosting the group coordinator of `group`: the leader of its `__consumer_offsets` partition,
/// `abs(group.hashCode()) % partitions` as Kafka computes it (Java's `String.hashCode`).
fn coordinator_of(brokers: &str, group: &str) -> i32 {
    let hash = group.encode_utf16().fold(0i32, |hash, unit| hash.wrapping_mul(31).wrapping_add(i32::from(unit)));
    let offsets_leaders = leaders(brokers, "__consumer_offsets");
    let partition = usize::try_from(hash & 0x7fff_ffff).expect("positive") % offsets_leaders.len();
    offsets_leaders[partition]
}

/// One answer the load saw.
#[derive(Debug, Clone)]
struct Answer {
    sent_at: Instant,
    event_id: String,
    status: StatusCode,
    retry_after: bool,
}

/// Signed deliveries posted by `n_workers` concurrent clients, each waiting for its answer before the next,
/// until stopped.
struct Load {
    answers: Arc<Mutex<Vec<Answer>>>,
    stop: Arc<AtomicBool>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(stack: &TestStack, n_workers: usize) -> Self {
        let answers = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let run = uuid::Uuid::new_v4().simple().to_string();
        let workers = (0..n_workers)
            .map(|worker| {
                let (answers, stop, run, addr) = (answers.clone(), stop.clone(), run.clone(), stack.gateway_addr);
                tokio::spawn(async move {
                    let client = Client::builder(TokioExecutor::new()).build_http();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let delivery = Delivery::new(format!(r#"{{"run":"{run}","worker":{worker},"n":{n}}}"#));
                        let request = Request::post(format!("http://{addr}/webhooks/github"))
                            .header("content-type", "application/json")
                            .header("x-github-delivery", &delivery.delivery_id)
                            .header("x-github-event", "push")
                            .header("x-hub-signature-256", delivery.signature(TEST_SECRET))
                            .body(Full::new(delivery.body.clone()))
                            .expect("request");
                        let sent_at = Instant::now();
                        let response = client.request(request).await.expect("the gateway answers every request");
                        let answer = Answer {
                            sent_at,
                            event_id: delivery.delivery_id,
                            status: response.status(),
                            retry_after: response.headers().contains_key(http::header::RETRY_AFTER),
                        };
                        answers.lock().expect("answers").push(answer);
                        if response.status() != StatusCode::ACCEPTED {
                            // A client backs off after a 503 (as a provider would), without hammering.
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                })
            })
            .collect();
        Self { answers, stop, workers }
    }

    fn answers(&self) -> Vec<Answer> {
        self.answers.lock().expect("answers").clone()
    }

    /// Acknowledged requests sent after `since`.
    fn accepted_since(&self, since: Instant) -> usize {
        self.answers().iter().filter(|a| a.sent_at >= since && a.status == StatusCode::ACCEPTED).count()
    }

    async fn stop(self) -> Vec<Answer> {
        self.stop.store(true, Ordering::Relaxed);
        for worker in self.workers {
            worker.await.expect("load worker");
        }
        self.answers.lock().expect("answers").clone()
    }
}

/// Every answer is 202, or 503 with `Retry-After`; returns the acknowledged event ids.
fn only_202_or_503(answers: &[Answer]) -> HashSet<String> {
    for answer in answers {
        let fine = answer.status == StatusCode::ACCEPTED
            || (answer.status == StatusCode::SERVICE_UNAVAILABLE && answer.retry_after);
        assert!(fine, "only 202 or 503 with Retry-After while brokers are lost: {answer:?}");
    }
    answers.iter().filter(|a| a.status == StatusCode::ACCEPTED).map(|a| a.event_id.clone()).collect()
}

/// Asserts every acknowledged event is in the inbound topic.
async fn every_acknowledged_event_is_in_the_topic(stack: &TestStack, acknowledged: &HashSet<String>) {
    let in_kafka: HashSet<String> = stack
        .inbound_records()
        .await
        .iter()
        .filter_map(|record| record.key().map(|key| String::from_utf8_lossy(key).into_owned()))
        .collect();
    let lost: Vec<_> = acknowledged.difference(&in_kafka).collect();
    assert!(lost.is_empty(), "{} acknowledged events are not in the topic: {lost:?}", lost.len());
}

/// The longest time, from `since`, without an acknowledged request.
fn longest_gap_without_2xx(answers: &[Answer], since: Instant) -> Duration {
    let mut accepted: Vec<Instant> =
        answers.iter().filter(|a| a.status == StatusCode::ACCEPTED && a.sent_at >= since).map(|a| a.sent_at).collect();
    accepted.sort();
    let mut previous = since;
    let mut longest = Duration::ZERO;
    for at in accepted {
        longest = longest.max(at - previous);
        previous = at;
    }
    longest
}

async fn cluster_stack(n_consumers: usize) -> TestStack {
    let stack = TestStack::builder()
        .brokers(cluster_brokers())
        .replication(3)
        .partitions(3)
        .produce_timeout_ms(3_000)
        .consumers(n_consumers)
        .build()
        .await;
    let first = Delivery::new(format!(r#"{{"first":"{}"}}"#, stack.kafka.inbound_topic));
    eventually(Duration::from_secs(60), "the gateway acknowledges on the cluster", || async {
        stack.post(&first).await.status == StatusCode::ACCEPTED
    })
    .await;
    stack
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_inbound_leader_killed_under_load_loses_no_acknowledged_event_and_answers_only_202_or_503() {
    let _turn = cluster_turn().await;
    let stack = cluster_stack(0).await;
    let leader = busiest_leader(&stack.kafka.brokers, &stack.kafka.inbound_topic);
    let load_started = Instant::now();
    let load = Load::start(&stack, 8);
    eventually(Duration::from_secs(30), "load acknowledged", || async { load.accepted_since(load_started) >= 50 })
        .await;

    run_stack(&["stop-broker", &leader.to_string(), "--kill"]).await;
    let killed_at = Instant::now();
    eventually(Duration::from_secs(60), "2xx resumes without the leader", || async {
        load.accepted_since(killed_at) >= 50
    })
    .await;
    let resumed_after = load
        .answers()
        .iter()
        .filter(|a| a.sent_at >= killed_at && a.status == StatusCode::ACCEPTED)
        .map(|a| a.sent_at - killed_at)
        .min()
        .expect("a 2xx after the kill");
    run_stack(&["start-broker", &leader.to_string()]).await;
    let restarted_at = Instant::now();
    eventually(Duration::from_secs(30), "load acknowledged after the node's return", || async {
        load.accepted_since(restarted_at) >= 50
    })
    .await;
    let answers = load.stop().await;

    let acknowledged = only_202_or_503(&answers);
    every_acknowledged_event_is_in_the_topic(&stack, &acknowledged).await;
    let n_refused = answers.iter().filter(|a| a.status != StatusCode::ACCEPTED).count();
    eprintln!(
        "leader (node {leader}) killed: first 2xx sent {resumed_after:?} after the kill, longest gap without 2xx {:?}; \
         {} acknowledged, {n_refused} answered 503, 0 lost",
        longest_gap_without_2xx(&answers, killed_at),
        acknowledged.len()
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_of_three_brokers_down_gives_no_2xx_at_all_then_recovers() {
    let _turn = cluster_turn().await;
    let stack = cluster_stack(0).await;
    let leader = busiest_leader(&stack.kafka.brokers, &stack.kafka.inbound_topic);
    // The leader survives; both of its followers die: it cannot get a second in-sync copy of anything.
    let victims: Vec<String> = (1..=3).filter(|node| *node != leader).map(|node| node.to_string()).collect();
    run_stack(&["stop-broker", &victims[0], &victims[1], "--kill"]).await;
    let killed_at = Instant::now();

    let load = Load::start(&stack, 4);
    // Past `replica.lag.time.max.ms` (10 s): whether or not the ISR could shrink, nothing is acknowledged.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let outage = load.answers();
    assert!(!outage.is_empty(), "requests were answered during the outage");
    assert!(
        outage.iter().all(|a| a.status == StatusCode::SERVICE_UNAVAILABLE && a.retry_after),
        "with one in-sync replica of min.insync.replicas 2, nothing is acknowledged: {:?}",
        outage.iter().find(|a| a.status != StatusCode::SERVICE_UNAVAILABLE)
    );

    let restart_issued = Instant::now();
    run_stack(&["start-broker", &victims[0], &victims[1]]).await;
    let restarted_at = Instant::now();
    eventually(Duration::from_secs(90), "2xx resumes once two brokers are back", || async {
        load.accepted_since(restarted_at) >= 20
    })
    .await;
    let resumed_after = load
        .answers()
        .iter()
        .filter(|a| a.status == StatusCode::ACCEPTED)
        .map(|a| a.sent_at.saturating_duration_since(restart_issued))
        .min()
        .expect("a 2xx");
    let answers = load.stop().await;
    let acknowledged = only_202_or_503(&answers);
    every_acknowledged_event_is_in_the_topic(&stack, &acknowledged).await;
    eprintln!(
        "two of three brokers down for {:?}: {} requests answered 503, none 2xx; first 2xx {resumed_after:?} after \
         the two nodes were started again; {} acknowledged, 0 lost",
        restart_issued - killed_at,
        outage.len(),
        acknowledged.len()
    );
    stack.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_group_that_loses_its_coordinators_broker_keeps_processing_and_loses_nothing() {
    let _turn = cluster_turn().await;
    let stack = cluster_stack(2).await;
    stack.wait_until_assigned().await;
    let coordinator = coordinator_of(&stack.kafka.brokers, &stack.kafka.group_id);
    let load = Load::start(&stack, 4);
    eventually(Duration::from_secs(30), "events processed before the fault", || async {
        stack.handler.successes().len() >= 50
    })
    .await;

    run_stack(&["stop-broker", &coordinator.to_string(), "--kill"]).await;
    let processed_at_kill = stack.handler.successes().len();
    eventually(Duration::from_secs(60), "processing goes on without the coordinator's broker", || async {
        stack.handler.successes().len() >= processed_at_kill + 100
    })
    .await;
    run_stack(&["start-broker", &coordinator.to_string()]).await;
    let restarted_at = Instant::now();
    eventually(Duration::from_secs(30), "load acknowledged after the node's return", || async {
        load.accepted_since(restarted_at) >= 50
    })
    .await;
    let answers = load.stop().await;

    let acknowledged = only_202_or_503(&answers);
    every_acknowledged_event_is_in_the_topic(&stack, &acknowledged).await;
    eventually(Duration::from_secs(120), "every acknowledged event processed", || async {
        acknowledged.iter().all(|id| stack.handler.count(id) >= 1)
    })
    .await;
    // No consumer was killed, so nothing may be processed twice: a redelivery after a failed commit is skipped.
    let twice: Vec<_> = acknowledged.iter().filter(|id| stack.handler.count(id) > 1).collect();
    assert!(twice.is_empty(), "processed more than once: {twice:?}");
    eprintln!(
        "group coordinator's node {coordinator} killed: {} acknowledged, each processed once, 0 lost",
        acknowledged.len()
    );
    stack.shutdown().await;
}
