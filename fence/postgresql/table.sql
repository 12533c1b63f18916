CREATE TABLE IF NOT EXISTS redis_lock_fence (
    resource  text        PRIMARY KEY,
    token     bigint      NOT NULL CHECK (token > 0),
    fenced_at timestamptz NOT NULL DEFAULT now()
)
