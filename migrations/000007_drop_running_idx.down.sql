CREATE INDEX CONCURRENTLY IF NOT EXISTS builds_running_idx ON builds (updated_at)
WHERE status IN ('running', 'canceling');
