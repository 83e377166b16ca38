//! The single flight: one fetch per URL at a time, the other requests for that URL waiting for its turn.
//!
//! Each request that joins a flight holds a [`Joined`], and the flight's entry is removed when its last holder
//! drops it, whether the request finished, lost a race with another, or was cancelled at any await (the client
//! went away: hyper drops the request's future, h1 close or h2 `RST_STREAM`). The count of holders is kept under
//! the map's lock, so the entry cannot outlive them nor be removed while one still waits. At most `max` URLs are
//! in flight at once: a request for one more is refused at once (503), so no caller grows the map past it.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use hookline_signature::fetched::KeyUrl;

#[derive(Debug)]
pub struct Flights {
    flights: Mutex<HashMap<KeyUrl, Flight>>,
    max: usize,
}

#[derive(Debug)]
struct Flight {
    turn: Arc<tokio::sync::Mutex<()>>,
    holders: usize,
}

/// One request's place in a URL's flight; leaving (dropping it) removes the flight when nobody else is in it.
#[derive(Debug)]
pub struct Joined<'a> {
    flights: &'a Flights,
    url: KeyUrl,
    turn: Arc<tokio::sync::Mutex<()>>,
}

impl Flights {
    pub fn new(max: usize) -> Self {
        Self { flights: Mutex::new(HashMap::new()), max: max.max(1) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<KeyUrl, Flight>> {
        self.flights.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Joins `url`'s flight (starting it if none), or `None` when `max` other URLs are in flight already.
    pub fn join(&self, url: &KeyUrl) -> Option<Joined<'_>> {
        let mut flights = self.lock();
        let full = flights.len() >= self.max;
        let turn = match flights.get_mut(url) {
            Some(flight) => {
                flight.holders += 1;
                flight.turn.clone()
            }
            None if full => return None,
            None => {
                let turn = Arc::new(tokio::sync::Mutex::new(()));
                flights.insert(url.clone(), Flight { turn: turn.clone(), holders: 1 });
                turn
            }
        };
        Some(Joined { flights: self, url: url.clone(), turn })
    }

    /// URLs in flight now.
    pub fn len(&self) -> usize {
        self.lock().len()
    }
}

impl Joined<'_> {
    /// Waits until no other request of this flight is fetching.
    pub async fn turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.turn.lock().await
    }
}

impl Drop for Joined<'_> {
    fn drop(&mut self) {
        let mut flights = self.flights.lock();
        if let Some(flight) = flights.get_mut(&self.url) {
            flight.holders -= 1;
            if flight.holders == 0 {
                flights.remove(&self.url);
            }
        }
    }
}
