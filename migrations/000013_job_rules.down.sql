-- Builds and pipelines in the new states have no meaning before 000013: they end canceled.
UPDATE builds SET status = 'canceled', finished_at = now(), updated_at = now() WHERE status IN ('manual', 'scheduled');
UPDATE pipelines SET status = 'canceled', finished_at = now(), updated_at = now() WHERE status IN ('manual', 'scheduled');

ALTER TABLE builds DROP COLUMN left_behind, DROP COLUMN scheduled_at, DROP COLUMN needs, DROP COLUMN run_when;
ALTER TABLE builds DROP CONSTRAINT builds_status_check,
    ADD CONSTRAINT builds_status_check
        CHECK (status IN ('created', 'pending', 'waiting_for_runner_ack', 'running',
                          'canceling', 'success', 'failed', 'canceled', 'skipped')) NOT VALID;
ALTER TABLE pipelines DROP CONSTRAINT pipelines_status_check,
    ADD CONSTRAINT pipelines_status_check
        CHECK (status IN ('created', 'pending', 'running', 'success', 'failed', 'canceled')) NOT VALID;
ALTER TABLE pipelines DROP COLUMN per_job;
