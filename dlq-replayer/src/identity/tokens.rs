//! Scoped API tokens. A token is `hlt_<id>_<secret>`: a random public id (16 hex digits) and 256 random bits (64 hex
//! digits). The tokens topic keeps, per id, the token's name, scope, creator, revocation and the SHA-256 of the
//! whole token, never the token; it is shown once, to whoever created it. A presented token is found by its id
//! and its digest compared with the kept one in constant time.
//!
//! [`TokenBook`] is the topic read into memory; `serve` keeps one current by tailing the topic ([`LiveTokens`],
//! [`tail`]), the CLI reads the topic once. Only authentic records count, and a revocation is final: a token's old
//! creation record written again (by someone who can write the topic, not sign) does not bring it back, and `serve`
//! writes the revocation again so that compaction keeps it ([`Replayer::reassert_tokens`]).

use std::{
    collections::HashMap,
    sync::{
        RwLock,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use hookline_common::{
    config::KafkaConfig,
    kafka::{QuietContext, ReadFromStart, assignment_reader_config},
    record_auth::{RecordKeys, RecordKind, Verdict},
    wire::now_ms,
};
use hookline_record::identity::ApiTokenRecord;
use rdkafka::{Message, consumer::BaseConsumer, error::KafkaError};
use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio_util::sync::CancellationToken;

use super::{Principal, Scope};
use crate::ops::{OpError, Replayer};

const TOKEN_PREFIX: &str = "hlt_";
const METADATA_TIMEOUT: Duration = Duration::from_secs(10);

/// The SHA-256 of `token`, lowercase hex.
pub fn digest_hex(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A new token: its id and the whole token.
fn new_token() -> (String, String) {
    let id: [u8; 8] = rand::random();
    let secret: [u8; 32] = rand::random();
    let id = hex::encode(id);
    let token = format!("{TOKEN_PREFIX}{id}_{}", hex::encode(secret));
    (id, token)
}

/// The id a presented token names, if it has the shape of one.
pub fn id_of(token: &str) -> Option<&str> {
    let (id, secret) = token.strip_prefix(TOKEN_PREFIX)?.split_once('_')?;
    (id.len() == 16 && secret.len() == 64).then_some(id)
}

/// A name a token may be given: what the audit trail shows (`token:<name>`).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '@'))
}

/// A token as listed: everything kept but its digest.
#[derive(Debug, Clone, Serialize)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub scope: String,
    pub created_at_ms: i64,
    pub created_by: String,
    pub revoked_at_ms: Option<i64>,
    pub revoked_by: Option<String>,
}

impl From<&ApiTokenRecord> for TokenInfo {
    fn from(record: &ApiTokenRecord) -> Self {
        Self {
            id: record.id.clone(),
            name: record.name.clone(),
            scope: record.scope.clone(),
            created_at_ms: record.created_at_ms,
            created_by: record.created_by.clone(),
            revoked_at_ms: record.revoked_at_ms,
            revoked_by: record.revoked_by.clone(),
        }
    }
}

/// A token just created: the only time the token itself is seen.
#[derive(Debug, Clone, Serialize)]
pub struct IssuedToken {
    #[serde(flatten)]
    pub info: TokenInfo,
    pub token: String,
}

#[derive(Debug, Clone)]
struct Held {
    record: ApiTokenRecord,
    /// A later record of its key changed nothing (an old record written again, a tombstone, junk): after
    /// compaction a reader starting anew would not know this state, so `serve` writes it again.
    shadowed: bool,
}

/// Every token the topic holds, by id.
#[derive(Debug, Clone, Default)]
pub struct TokenBook {
    tokens: HashMap<String, Held>,
}

impl TokenBook {
    /// Reads one record of the topic under `key`: `token` is its value when it is authentic and a token record.
    pub fn read(&mut self, key: &[u8], token: Option<ApiTokenRecord>) {
        let Some(token) = token else {
            let id = std::str::from_utf8(key).ok().and_then(|key| key.strip_prefix("api-token:"));
            if let Some(held) = id.and_then(|id| self.tokens.get_mut(id)) {
                held.shadowed = true;
            }
            return;
        };
        match self.tokens.get_mut(&token.id) {
            None => {
                self.tokens.insert(token.id.clone(), Held { record: token, shadowed: false });
            }
            // Revoked is final; the same state written again is no longer shadowed.
            Some(held) if held.record.revoked_at_ms.is_some() => held.shadowed = token != held.record,
            Some(held) if token.revoked_at_ms.is_some() && token.sha256 == held.record.sha256 => {
                *held = Held { record: token, shadowed: false };
            }
            Some(held) => held.shadowed = token != held.record,
        }
    }

    /// The principal `presented` is, if it is a token of this book that is not revoked.
    pub fn authenticate(&self, presented: &str) -> Option<Principal> {
        let held = &self.tokens.get(id_of(presented)?)?.record;
        let kept = hex::decode(&held.sha256).ok()?;
        let matches: bool = Sha256::digest(presented.as_bytes()).as_slice().ct_eq(&kept).into();
        if !matches || held.revoked_at_ms.is_some() {
            return None;
        }
        Some(Principal { subject: format!("token:{}", held.name), scope: Scope::parse(&held.scope)? })
    }

    /// Every token, oldest first.
    pub fn list(&self) -> Vec<TokenInfo> {
        let mut tokens: Vec<TokenInfo> = self.tokens.values().map(|held| TokenInfo::from(&held.record)).collect();
        tokens.sort_by(|a, b| (a.created_at_ms, &a.id).cmp(&(b.created_at_ms, &b.id)));
        tokens
    }

    fn active_named(&self, name: &str) -> Option<&ApiTokenRecord> {
        self.tokens
            .values()
            .map(|held| &held.record)
            .find(|record| record.name == name && record.revoked_at_ms.is_none())
    }

    /// The token `id_or_name` names: by id, or the one not revoked with that name.
    fn find(&self, id_or_name: &str) -> Option<&ApiTokenRecord> {
        self.tokens.get(id_or_name).map(|held| &held.record).or_else(|| self.active_named(id_or_name))
    }

    fn shadowed(&self) -> Vec<ApiTokenRecord> {
        self.tokens.values().filter(|held| held.shadowed).map(|held| held.record.clone()).collect()
    }
}

/// The book `serve` keeps current ([`tail`]), and whether it has read the topic up to where it was at start.
#[derive(Debug, Default)]
pub struct LiveTokens {
    book: RwLock<TokenBook>,
    caught_up: AtomicBool,
}

impl LiveTokens {
    /// A book caught up with an empty topic: for tests of the router without a broker.
    #[cfg(test)]
    pub(crate) fn read_to_end_of_nothing() -> Self {
        Self { book: RwLock::default(), caught_up: AtomicBool::new(true) }
    }

    pub fn is_caught_up(&self) -> bool {
        self.caught_up.load(Ordering::Acquire)
    }

    pub fn book(&self) -> TokenBook {
        self.book.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// Whether token `id` exists and is not revoked (a console session made with it lives as long).
    pub fn is_active(&self, id: &str) -> bool {
        let book = self.book.read().unwrap_or_else(|poisoned| poisoned.into_inner());
        book.tokens.get(id).is_some_and(|held| held.record.revoked_at_ms.is_none())
    }

    pub fn authenticate(&self, presented: &str) -> Option<Principal> {
        self.book.read().unwrap_or_else(|poisoned| poisoned.into_inner()).authenticate(presented)
    }

    /// Applies a record this process wrote, before the tail reads it back: the writer's next request sees it.
    pub fn apply_own(&self, record: &ApiTokenRecord) {
        let mut book = self.book.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        book.read(record.key().as_bytes(), Some(record.clone()));
    }

    fn read(&self, key: &[u8], token: Option<ApiTokenRecord>) {
        self.book.write().unwrap_or_else(|poisoned| poisoned.into_inner()).read(key, token);
    }
}

/// The token record `record` holds, if it is authentic and one.
fn decode(keys: &RecordKeys, topic: &str, record: &impl Message) -> Option<ApiTokenRecord> {
    let verdict =
        keys.verify_as(RecordKind::Identity, topic, record.key(), record.payload(), record.headers(), now_ms());
    if !matches!(verdict, Verdict::Authentic { .. }) {
        tracing::warn!(offset = record.offset(), outcome = verdict.label(), "token record refused: not applied");
        return None;
    }
    ApiTokenRecord::decode(record.key().unwrap_or_default(), record.payload().unwrap_or_default())
}

/// Reads the tokens topic into `live` from its start, then follows it until `stop` (or a Kafka error: the caller
/// starts over). `live` is caught up once every partition is read up to its end at start. Blocking.
pub fn tail(
    kafka: &KafkaConfig,
    topic: &str,
    keys: &RecordKeys,
    live: &LiveTokens,
    stop: &CancellationToken,
) -> Result<(), KafkaError> {
    let consumer: BaseConsumer<QuietContext> =
        assignment_reader_config(kafka, &[]).create_with_context(QuietContext::new("tokens-tail"))?;
    let mut start = ReadFromStart::assign(&consumer, topic, METADATA_TIMEOUT)?;
    while !stop.is_cancelled() {
        if start.passed() {
            live.caught_up.store(true, Ordering::Release);
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            start.idle(&consumer);
            continue;
        };
        let message = message?;
        live.read(message.key().unwrap_or_default(), decode(keys, topic, &message));
        start.read(message.partition(), message.offset());
    }
    Ok(())
}

impl Replayer {
    fn tokens_topic(&self) -> String {
        self.config().tokens_topic()
    }

    /// The tokens topic as it is now (the CLI's book; `serve` keeps a live one).
    pub async fn token_book(&self) -> Result<TokenBook, OpError> {
        self.ensure_identity_topics().await?;
        let (kafka, topic, keys) = (self.config().kafka.clone(), self.tokens_topic(), self.record_keys().clone());
        let book = tokio::task::spawn_blocking(move || {
            let mut book = TokenBook::default();
            hookline_common::kafka::visit_topic(&kafka, &topic, Duration::from_secs(30), |record| {
                book.read(record.key().unwrap_or_default(), decode(&keys, &topic, record));
            })?;
            Ok::<_, KafkaError>(book)
        })
        .await??;
        Ok(book)
    }

    /// Creates a token named `name` with `scope`, by `by` (a verified subject); `book` is the tokens known now,
    /// so that a name is held by one token at a time. The answer holds the token, never kept anywhere.
    pub async fn create_token(
        &self,
        book: &TokenBook,
        name: &str,
        scope: &str,
        by: &str,
    ) -> Result<(IssuedToken, ApiTokenRecord), OpError> {
        let name = name.trim();
        if !valid_name(name) {
            return Err(OpError::BadRequest(format!("`{name}` is not a token name: 1 to 100 of A-Z a-z 0-9 . - _ @")));
        }
        let scope = Scope::parse(scope.trim())
            .ok_or_else(|| OpError::BadRequest(format!("`{scope}` is not a scope: read, operate or admin")))?;
        if book.active_named(name).is_some() {
            return Err(OpError::BadRequest(format!("a token named `{name}` exists: revoke it first")));
        }
        self.ensure_identity_topics().await?;
        let (id, token) = new_token();
        let record = ApiTokenRecord {
            id,
            name: name.to_owned(),
            scope: scope.as_str().to_owned(),
            sha256: digest_hex(&token),
            created_at_ms: now_ms(),
            created_by: by.to_owned(),
            revoked_at_ms: None,
            revoked_by: None,
        };
        self.send(record.encode(&self.tokens_topic())).await?;
        tracing::info!(token_id = %record.id, name = %record.name, scope = %record.scope, by, "API token created");
        let detail = serde_json::json!({ "id": record.id, "name": record.name, "scope": record.scope });
        self.audit(by, "token.create", detail).await?;
        Ok((IssuedToken { info: TokenInfo::from(&record), token }, record))
    }

    /// Revokes the token `id_or_name` names (its id, or the name of one not revoked), by `by`.
    pub async fn revoke_token(
        &self,
        book: &TokenBook,
        id_or_name: &str,
        by: &str,
    ) -> Result<Option<ApiTokenRecord>, OpError> {
        let Some(held) = book.find(id_or_name.trim()) else { return Ok(None) };
        if held.revoked_at_ms.is_some() {
            return Err(OpError::BadRequest(format!("token `{}` ({}) is revoked already", held.id, held.name)));
        }
        let record = ApiTokenRecord { revoked_at_ms: Some(now_ms()), revoked_by: Some(by.to_owned()), ..held.clone() };
        self.ensure_identity_topics().await?;
        self.send(record.encode(&self.tokens_topic())).await?;
        tracing::info!(token_id = %record.id, name = %record.name, by, "API token revoked");
        self.audit(by, "token.revoke", serde_json::json!({ "id": record.id, "name": record.name })).await?;
        Ok(Some(record))
    }

    /// Writes again every token state a later record of its key shadows, so that compaction keeps it (a revoked
    /// token stays revoked for a reader starting anew). Returns how many were written.
    pub async fn reassert_tokens(&self, live: &LiveTokens) -> Result<usize, OpError> {
        let shadowed = live.book().shadowed();
        for record in &shadowed {
            self.send(record.encode(&self.tokens_topic())).await?;
            live.apply_own(record);
            tracing::warn!(token_id = %record.id, "a token's state was shadowed by a later record that changed nothing: written again");
        }
        Ok(shadowed.len())
    }

    /// Runs [`Self::reassert_tokens`] every minute until `shutdown`.
    pub async fn keep_tokens(self, live: std::sync::Arc<LiveTokens>, shutdown: CancellationToken) {
        loop {
            if live.is_caught_up()
                && let Err(error) = self.reassert_tokens(&live).await
            {
                tracing::warn!(error = %error, "cannot write again the shadowed token states");
            }
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(60)) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(token: &str, name: &str, scope: &str) -> ApiTokenRecord {
        ApiTokenRecord {
            id: id_of(token).unwrap().to_owned(),
            name: name.to_owned(),
            scope: scope.to_owned(),
            sha256: digest_hex(token),
            created_at_ms: 1,
            created_by: "token:root".to_owned(),
            revoked_at_ms: None,
            revoked_by: None,
        }
    }

    #[test]
    fn a_token_authenticates_as_its_name_and_scope_until_revoked_and_revoked_is_final() {
        let (_, token) = new_token();
        let created = record(&token, "alice", "operate");
        let mut book = TokenBook::default();
        book.read(created.key().as_bytes(), Some(created.clone()));
        let alice = Principal { subject: "token:alice".to_owned(), scope: Scope::Operate };
        assert_eq!(book.authenticate(&token), Some(alice));
        // Another secret under the same id, and a token of another shape, are nobody.
        let forged = format!("{}{}", &token[..token.len() - 1], if token.ends_with('0') { '1' } else { '0' });
        assert_eq!(book.authenticate(&forged), None);
        assert_eq!(book.authenticate("a-replayer-token-of-forty-characters-xyz"), None);
        let revoked =
            ApiTokenRecord { revoked_at_ms: Some(2), revoked_by: Some("token:root".to_owned()), ..created.clone() };
        book.read(revoked.key().as_bytes(), Some(revoked.clone()));
        assert_eq!(book.authenticate(&token), None);
        // The creation record written again does not bring it back; it shadows the revocation, which `serve`
        // writes again.
        book.read(created.key().as_bytes(), Some(created.clone()));
        assert_eq!(book.authenticate(&token), None);
        assert_eq!(book.shadowed(), vec![revoked.clone()]);
        book.read(revoked.key().as_bytes(), Some(revoked));
        assert!(book.shadowed().is_empty());
        book.read(created.key().as_bytes(), None);
        assert_eq!(book.shadowed().len(), 1, "a tombstone shadows it too");
    }

    #[test]
    fn tokens_are_256_random_bits_with_an_id_and_names_are_checked() {
        let (id, token) = new_token();
        assert_eq!(id_of(&token), Some(id.as_str()));
        assert_eq!(token.len(), TOKEN_PREFIX.len() + 16 + 1 + 64);
        assert_ne!(new_token().1, token);
        assert!(valid_name("ci-deploy") && valid_name("alice@example.com"));
        assert!(!valid_name("") && !valid_name("a b") && !valid_name("token:x"));
    }
}
