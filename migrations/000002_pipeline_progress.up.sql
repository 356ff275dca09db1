-- Stuck-stage detection and the reapers.

-- When the pipeline last made progress (a build of it changed state). Kept lazily: the stuck
-- check reads it, and moves it forward from the builds' own timestamps when it lags.
ALTER TABLE pipelines ADD COLUMN progressed_at timestamptz NOT NULL DEFAULT now();
-- Stages up to this index count as done for advancement (optimistic stuck strategy).
ALTER TABLE pipelines ADD COLUMN advanced_past integer NOT NULL DEFAULT -1;
CREATE INDEX pipelines_unfinished_idx ON pipelines (progressed_at) WHERE status IN ('pending', 'running');

-- When a running build exceeds its job timeout (started_at + timeout), set when it starts.
ALTER TABLE builds ADD COLUMN run_deadline timestamptz;
UPDATE builds SET run_deadline = started_at + make_interval(secs => timeout_seconds)
WHERE started_at IS NOT NULL AND status IN ('running', 'canceling');
CREATE INDEX builds_run_deadline_idx ON builds (run_deadline) WHERE status = 'running';
