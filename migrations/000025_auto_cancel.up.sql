-- workflow:auto_cancel (issue 17): a pipeline keeps the setting its .gitlab-ci.yml chose
-- (workflow:auto_cancel, or the first matching workflow:rules entry's), because it is read
-- later: on_new_commit when a newer pipeline on the same ref is created (the older one's
-- setting decides), on_job_failure when one of its jobs fails. Pipelines created before
-- this migration, and those defined as JSON, have GitLab's defaults.
ALTER TABLE pipelines
    ADD COLUMN auto_cancel_on_new_commit text NOT NULL DEFAULT 'conservative'
        CHECK (auto_cancel_on_new_commit IN ('conservative', 'interruptible', 'none')),
    ADD COLUMN auto_cancel_on_job_failure text NOT NULL DEFAULT 'none'
        CHECK (auto_cancel_on_job_failure IN ('none', 'all'));
-- The on_job_failure pass's queue: alive pipelines that cancel on a failure (few).
CREATE INDEX pipelines_cancel_on_failure_idx ON pipelines (id)
    WHERE auto_cancel_on_job_failure = 'all' AND status IN ('created', 'pending', 'running', 'manual', 'scheduled');
