INSERT INTO redis_lock_fence (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE
    SET token = EXCLUDED.token, fenced_at = now()
    WHERE redis_lock_fence.token <= EXCLUDED.token
RETURNING token
