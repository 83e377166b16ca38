//! What a service's starts recorded in Redis: whether it ran on the unscoped layout ([`ServiceHistory`]), and when
//! it first started on the bucketed layout and whether it ran on the previous one before ([`LayoutHistory`]).

use hookline_common::wire::{now_ms, redis_key};

use super::{Dedupe, DedupeError};

/// What a service's first start on a scoped build found, recorded once in `<prefix>:svc=<service>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceHistory {
    /// The service's consumer group had committed offsets: it ran on the unscoped layout before.
    pub upgraded: bool,
    /// When it first started on a scoped build, ms since the epoch.
    pub since_ms: i64,
}

impl ServiceHistory {
    fn encode(self) -> String {
        let kind = if self.upgraded { redis_key::SERVICE_UPGRADED } else { redis_key::SERVICE_NEW };
        format!("{kind}:{}", self.since_ms)
    }

    fn decode(value: &str) -> Option<Self> {
        let (kind, since) = value.split_once(':')?;
        let upgraded = match kind {
            redis_key::SERVICE_UPGRADED => true,
            redis_key::SERVICE_NEW => false,
            _ => return None,
        };
        Some(Self { upgraded, since_ms: since.parse().ok()? })
    }
}

/// What a service's first start on the bucketed layout found, recorded once in `<prefix>:svc=<service>:layout`
/// ([`redis_key::layout`]): `upgraded:<ms>` or `new:<ms>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayoutHistory {
    /// The service ran on the previous layout before (its service key existed, or its group had committed
    /// offsets): its keys in that layout are honoured ([`super::legacy`]).
    pub upgraded: bool,
    /// When it first started on the bucketed layout, ms since the epoch.
    pub since_ms: i64,
}

impl Dedupe {
    /// The service's history as recorded in Redis; `None` before its first scoped start.
    pub async fn recorded_history(&self) -> Result<Option<ServiceHistory>, DedupeError> {
        let key = redis_key::service(&self.prefix, &self.service);
        let recorded: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut self.connection.clone()).await?;
        Ok(recorded.as_deref().and_then(ServiceHistory::decode))
    }

    /// Records the service's history at its first scoped start (`upgraded`: its consumer group had committed
    /// offsets), unless another member recorded it first; returns what is recorded.
    pub async fn record_history(&self, upgraded: bool) -> Result<ServiceHistory, DedupeError> {
        let key = redis_key::service(&self.prefix, &self.service);
        let history = ServiceHistory { upgraded, since_ms: now_ms() };
        let mut connection = self.connection.clone();
        let _: Option<String> =
            redis::cmd("SET").arg(&key).arg(history.encode()).arg("NX").query_async(&mut connection).await?;
        Ok(self.recorded_history().await?.unwrap_or(history))
    }

    /// Records the service's first start on the bucketed layout (`upgraded`: it ran on the previous layout),
    /// unless another member recorded it first; returns what is recorded.
    pub async fn record_layout(&self, upgraded: bool) -> Result<LayoutHistory, DedupeError> {
        let key = redis_key::layout(&self.prefix, &self.service);
        let kind = if upgraded { redis_key::SERVICE_UPGRADED } else { redis_key::SERVICE_NEW };
        let mut connection = self.connection.clone();
        let _: Option<String> = redis::cmd("SET")
            .arg(&key)
            .arg(format!("{kind}:{}", now_ms()))
            .arg("NX")
            .query_async(&mut connection)
            .await?;
        let recorded: Option<String> = redis::cmd("GET").arg(&key).query_async(&mut connection).await?;
        let decoded = recorded.as_deref().and_then(|value| {
            let (kind, since) = value.split_once(':')?;
            Some(LayoutHistory { upgraded: kind == redis_key::SERVICE_UPGRADED, since_ms: since.parse().ok()? })
        });
        // Unreadable (written by hand?): honour the previous layout from now, the safe side.
        Ok(decoded.unwrap_or(LayoutHistory { upgraded: true, since_ms: now_ms() }))
    }
}
