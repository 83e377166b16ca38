-- The compose postgres service runs this once, on its first start (docker-entrypoint-initdb.d), as the hookline
-- role in database shop: the example service's own table, and the dedupe table of deploy/config/consumer-orders.toml
-- (what `hookline-consumer --config consumer-orders.toml migrate --print` prints; or run `migrate` itself).

-- The example's orders: a payment webhook moves one from pending to paid.
CREATE TABLE IF NOT EXISTS orders (
    id     text PRIMARY KEY,
    status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'paid', 'refunded')),
    amount bigint
);
INSERT INTO orders (id) VALUES ('o-1001'), ('o-1002'), ('o-1003') ON CONFLICT DO NOTHING;

-- The dedupe table (routes[0].handler).
CREATE TABLE IF NOT EXISTS hookline_processed_events (
    service      text        NOT NULL,
    source       text        NOT NULL,
    event_id     text        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    outcome      text        NOT NULL DEFAULT 'applied' CHECK (outcome IN ('applied', 'skipped')),
    row_counts   bigint[],
    PRIMARY KEY (service, source, event_id)
);
CREATE INDEX IF NOT EXISTS hookline_processed_events_processed_at ON hookline_processed_events (processed_at);
