//! `hookline_consumer_lag_records` is true and stable: every assigned inbound partition has its series at every
//! scrape (no reset-and-refill between scrapes), and a partition with nothing new since the group's committed
//! offset reports no lag (not the whole log, as when the consumer's position is not known yet).

use std::{collections::BTreeMap, time::Duration};

use hookline_tests::{Delivery, TestStack, eventually};

const N_PARTITIONS: usize = 3;

/// The lag series of one `/metrics` scrape of consumer `index`: partition → records.
async fn lag_series(stack: &TestStack, index: usize) -> BTreeMap<String, f64> {
    let scrape = stack.consumer_scrape(index).await;
    scrape
        .samples("hookline_consumer_lag_records", &[])
        .filter_map(|sample| Some((sample.labels.get("partition")?.clone(), sample.value)))
        .collect()
}

#[tokio::test]
async fn lag_gauge_is_stable_between_scrapes_and_reports_no_lag_for_partitions_with_nothing_new() {
    let mut stack = TestStack::builder().partitions(N_PARTITIONS as i32).consumer().build().await;
    let n_events = 12;
    for n in 0..n_events {
        stack.post_accepted(&Delivery::new(format!(r#"{{"lag":{n}}}"#))).await;
    }
    stack.wait_until_handled(n_events).await;
    // A graceful stop commits every handled record: the group is now fully caught up.
    stack.stop_consumer(0).await;

    let fresh = stack.start_consumer().await;
    eventually(Duration::from_secs(60), "the new member has every inbound partition's lag series", || async {
        lag_series(&stack, fresh).await.len() == N_PARTITIONS
    })
    .await;
    // Three watch intervals' worth of scrapes: the same series every time, and no invented lag.
    for scrape in 0..24 {
        let series = lag_series(&stack, fresh).await;
        assert_eq!(series.len(), N_PARTITIONS, "scrape {scrape}: a series vanished: {series:?}");
        assert!(series.values().all(|lag| *lag == 0.0), "scrape {scrape}: nothing is behind: {series:?}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }

    // Events the member has not handled yet are lag; once handled, the lag is gone again.
    stack.handler.set_delay(Duration::from_millis(500));
    for n in 0..3 {
        stack.post_accepted(&Delivery::new(format!(r#"{{"lag":"new {n}"}}"#))).await;
    }
    stack.wait_until_handled(3).await;
    eventually(Duration::from_secs(30), "lag back to zero once the new events are handled", || async {
        let series = lag_series(&stack, fresh).await;
        series.len() == N_PARTITIONS && series.values().all(|lag| *lag == 0.0)
    })
    .await;
    stack.shutdown().await;
}
