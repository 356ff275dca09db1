-- Pipelines with needs and when (issue 12): their jobs advance one by one, as GitLab's
-- pipeline processing does, instead of stage by stage; manual jobs wait to be played and
-- delayed ones for their time.

-- per_job: some job has needs or a when other than on_success. Set at creation; the other
-- pipelines keep the stage-by-stage advancement, which costs one grouped count.
ALTER TABLE pipelines ADD COLUMN per_job boolean NOT NULL DEFAULT false;

-- manual: a blocking manual job waits to be played (GitLab shows it "blocked");
-- scheduled: nothing runs and a delayed job waits for its time. NOT VALID: the new check
-- is wider than the old one, which every row passed, and validating it would scan the
-- table under this statement's exclusive lock.
ALTER TABLE pipelines DROP CONSTRAINT pipelines_status_check,
    ADD CONSTRAINT pipelines_status_check
        CHECK (status IN ('created', 'pending', 'running', 'success', 'failed', 'canceled', 'manual', 'scheduled')) NOT VALID;

ALTER TABLE builds DROP CONSTRAINT builds_status_check,
    ADD CONSTRAINT builds_status_check
        CHECK (status IN ('created', 'manual', 'scheduled', 'pending', 'waiting_for_runner_ack', 'running',
                          'canceling', 'success', 'failed', 'canceled', 'skipped')) NOT VALID;

-- What the job-by-job plan reads of every latest attempt, as columns rather than from the
-- payload: reading them out of the jsonb would decompress each build's whole payload
-- (scripts, variables) on every advance of a large pipeline. Constant defaults: no rewrite.
ALTER TABLE builds
    -- .gitlab-ci.yml's when.
    ADD COLUMN run_when text NOT NULL DEFAULT 'on_success',
    ADD CONSTRAINT builds_run_when_check
        CHECK (run_when IN ('on_success', 'on_failure', 'always', 'manual', 'delayed')) NOT VALID,
    -- Names of the jobs it needs; NULL: no needs (stage order), '{}': needs: [].
    ADD COLUMN needs text[],
    -- When a scheduled (delayed) build becomes pending. The due pass reads scheduled builds
    -- through builds_status_idx: there are few of them at any time.
    ADD COLUMN scheduled_at timestamptz,
    -- The optimistic stuck strategy stopped waiting for this build (pipelines planned per job;
    -- stage pipelines record it as pipelines.advanced_past).
    ADD COLUMN left_behind boolean NOT NULL DEFAULT false;
