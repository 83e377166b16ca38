//! A service's `/metrics` read into samples, so a test asks for "the sum of `hookline_consumer_events_total` where
//! `outcome` is `processed`" instead of matching lines: the workspace's one reader of that text
//! ([`hookline_common::prometheus_text`]).

pub use hookline_common::prometheus_text::{Sample, Scrape};
