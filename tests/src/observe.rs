//! What a test reads from and writes around the running stack: records of its topics, records produced past the
//! gateway (signed, unsigned, in batches), dedupe markers, the services' metrics, and waits for the consumers.

use std::time::Duration;

use hookline_common::{
    kafka::{producer_config, read_topic},
    wire::{kafka::owned_headers, now_ms, redis_key::DEDUPE_CLAIM_PREFIX},
};
use hookline_record::Outgoing;
use http::Request;
use http_body_util::Full;
use rdkafka::{
    message::{OwnedHeaders, OwnedMessage},
    producer::{FutureProducer, FutureRecord},
};

use crate::{TestStack, eventually, prometheus::Scrape};

impl TestStack {
    /// Every record now in `topic`. Just after a broker died, metadata may name no leader for a while (a leader
    /// election in progress): that is waited out, for at most 30 s.
    pub async fn records(&self, topic: &str) -> Vec<OwnedMessage> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let (kafka, topic) = (self.kafka.clone(), topic.to_owned());
            match tokio::task::spawn_blocking(move || read_topic(&kafka, &topic, Duration::from_secs(20)))
                .await
                .expect("reader task")
            {
                Ok(records) => return records,
                Err(error) if std::time::Instant::now() < deadline => {
                    eprintln!("read topic: {error}; trying again");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                Err(error) => panic!("read topic: {error}"),
            }
        }
    }

    /// Every record now in the inbound topic.
    pub async fn inbound_records(&self) -> Vec<OwnedMessage> {
        self.records(&self.kafka.inbound_topic).await
    }

    /// Produces a record straight to the inbound topic (bypassing the gateway), to `partition`, with these
    /// headers, signed with the stack's record key as a hookline writer would: for records the gateway would never
    /// write, or to place copies of one event on two partitions. ([`Self::produce_unsigned`] for the unsigned.)
    pub async fn produce_raw(&self, partition: i32, key: &str, headers: OwnedHeaders, body: &[u8]) {
        let headers = self.signed(&self.kafka.inbound_topic, Some(key.as_bytes()), body, &headers);
        self.produce_unsigned(partition, key, headers, body).await;
    }

    /// `record` signed with the stack's record key, as a hookline writer's producer signs it: what a service
    /// that built this record wrote, byte for byte (the MAC is deterministic).
    pub fn signed_record(&self, mut record: Outgoing) -> Outgoing {
        self.record_keys().sign_record(&mut record, now_ms()).expect("a key valid now");
        record
    }

    /// Produces `record`, as a writer built it, straight to `partition` of its topic, signed as a hookline writer
    /// signs it: for records the gateway would never write (a re-drive, say).
    pub async fn produce_record(&self, partition: i32, record: Outgoing) {
        let record = self.signed_record(record);
        let producer: FutureProducer = producer_config(&self.kafka).create().expect("producer");
        let mut out =
            FutureRecord::<[u8], [u8]>::to(&record.topic).partition(partition).headers(owned_headers(&record.headers));
        if let Some(key) = &record.key {
            out = out.key(&key[..]);
        }
        if let Some(body) = &record.body {
            out = out.payload(&body[..]);
        }
        producer.send(out, Duration::from_secs(10)).await.expect("produced");
    }

    /// Produces a record straight to the inbound topic with exactly these headers: what a client without the
    /// record key can write.
    pub async fn produce_unsigned(&self, partition: i32, key: &str, headers: OwnedHeaders, body: &[u8]) {
        let producer: FutureProducer = producer_config(&self.kafka).create().expect("producer");
        let record =
            FutureRecord::to(&self.kafka.inbound_topic).partition(partition).key(key).payload(body).headers(headers);
        producer.send(record, Duration::from_secs(10)).await.expect("produced");
    }

    /// Produces many records straight to the inbound topic with one producer, waiting for every acknowledgement:
    /// `(partition, key, headers, body)`.
    pub async fn produce_raw_batch(&self, records: Vec<(i32, String, OwnedHeaders, Vec<u8>)>) {
        self.produce_raw_batch_to(&self.kafka.inbound_topic, records).await;
    }

    /// [`Self::produce_raw_batch`] to another topic (a source's own topic, say), signed for that topic.
    pub async fn produce_raw_batch_to(&self, topic: &str, records: Vec<(i32, String, OwnedHeaders, Vec<u8>)>) {
        // Test input, not the product's produce path: a broker slowed by a neighbouring test's flood must delay it,
        // not fail it (the stack's 5 s produce timeout is for the services under test).
        let producer: FutureProducer =
            producer_config(&self.kafka).set("message.timeout.ms", "120000").create().expect("producer");
        // Enqueued all at once (in order, so offsets follow the input), then every acknowledgement awaited.
        let deliveries: Vec<_> = records
            .iter()
            .map(|(partition, key, headers, body)| {
                let headers = self.signed(topic, Some(key.as_bytes()), body, headers);
                let record = FutureRecord::to(topic)
                    .partition(*partition)
                    .key(key.as_str())
                    .payload(body.as_slice())
                    .headers(headers);
                producer.send_result(record).map_err(|(error, _)| error).expect("enqueued")
            })
            .collect();
        for delivery in deliveries {
            delivery.await.expect("delivery report").map_err(|(error, _)| error).expect("produced");
        }
    }

    /// Forgets every dedupe marker of the stack in Redis: as if the done markers were lost (a Redis failover
    /// without persistence, an eviction), so only a handler's own record (the `postgres` handler's dedupe row) can
    /// tell that an event was applied.
    ///
    /// A handler's effect can be visible before its done marker is written (the `postgres` handler commits, then
    /// the consumer marks the event done), so this first waits until no key holds a live claim: a done marker
    /// written after the forgetting would make the next copy a Redis duplicate, not the re-delivery the caller means.
    pub async fn forget_dedupe_markers(&self) {
        let client = redis::Client::open(self.redis.url.as_str()).expect("redis url");
        let mut connection = client.get_multiplexed_async_connection().await.expect("redis");
        let pattern = format!("{}*", self.redis.key_prefix);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let keys = loop {
            let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut connection).await.expect("keys");
            let values: Vec<Option<String>> = if keys.is_empty() {
                Vec::new()
            } else {
                redis::cmd("MGET").arg(&keys).query_async(&mut connection).await.expect("mget")
            };
            if !values.iter().flatten().any(|value| value.starts_with(DEDUPE_CLAIM_PREFIX)) {
                break keys;
            }
            assert!(std::time::Instant::now() < deadline, "a dedupe key still holds a claim after 30 s");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(!keys.is_empty(), "the stack's dedupe markers are under its prefix");
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut connection).await.expect("del");
    }

    /// One consumer's `/metrics`, read.
    pub async fn consumer_scrape(&self, index: usize) -> Scrape {
        self.scrape(self.consumers[index].admin_addr).await
    }

    /// The gateway's `/metrics`, read.
    pub async fn gateway_scrape(&self) -> Scrape {
        self.scrape(self.gateway_admin_addr).await
    }

    /// The `/metrics` of the admin listener at `addr` (a service the test runs beside the stack), read.
    pub async fn scrape(&self, addr: std::net::SocketAddr) -> Scrape {
        let request = Request::get(format!("http://{addr}/metrics")).body(Full::default()).expect("request");
        Scrape::parse(&String::from_utf8_lossy(&self.send(request).await.body))
    }

    /// The sum of one consumer's samples of `metric` carrying every one of `labels`.
    pub async fn consumer_metric(&self, index: usize, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.consumer_scrape(index).await.sum(metric, labels)
    }

    /// The sum of the gateway's samples of `metric` carrying every one of `labels`.
    pub async fn gateway_metric(&self, metric: &str, labels: &[(&str, &str)]) -> f64 {
        self.gateway_scrape().await.sum(metric, labels)
    }

    /// `hookline_consumer_events_total` with this outcome, summed over the running consumers.
    pub async fn consumer_events(&self, outcome: &str) -> u64 {
        let mut total = 0.0;
        for index in 0..self.consumers.len() {
            if self.consumers[index].task.is_some() {
                total += self.consumer_metric(index, "hookline_consumer_events_total", &[("outcome", outcome)]).await;
            }
        }
        total as u64
    }

    /// Waits until the running consumers have handled (processed, skipped or dead-lettered) `n_records` records;
    /// after 60 s, panics with every outcome the consumers counted, so a failure says where the records went.
    pub async fn wait_until_handled(&self, n_records: u64) {
        self.wait_until_handled_within(n_records, Duration::from_secs(60)).await;
    }

    /// [`Self::wait_until_handled`] with its own deadline (after a broker restart, which the group's coordinator
    /// must first reload).
    pub async fn wait_until_handled_within(&self, n_records: u64, within: Duration) {
        let deadline = std::time::Instant::now() + within;
        loop {
            let mut handled = 0;
            for outcome in ["processed", "duplicate", "dead_lettered_before", "dead_lettered"] {
                handled += self.consumer_events(outcome).await;
            }
            if handled >= n_records {
                return;
            }
            if std::time::Instant::now() >= deadline {
                let mut counted = Vec::new();
                for outcome in hookline_consumer::metrics::event_outcome::ALL {
                    counted.push(format!("{outcome} {}", self.consumer_events(outcome).await));
                }
                panic!(
                    "timed out after 60s waiting for {n_records} records handled by the consumers: {handled} handled; \
                     the consumers counted {}",
                    counted.join(", ")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until every running consumer has at least one partition assigned.
    pub async fn wait_until_assigned(&self) {
        eventually(Duration::from_secs(60), "every consumer has partitions", || async {
            for index in 0..self.consumers.len() {
                if self.consumers[index].task.is_some()
                    && self.consumer_metric(index, "hookline_consumer_assigned_partitions", &[]).await < 1.0
                {
                    return false;
                }
            }
            true
        })
        .await;
    }
}
