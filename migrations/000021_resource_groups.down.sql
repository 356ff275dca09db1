ALTER TABLE pipelines DROP COLUMN resource_groups;
DROP INDEX builds_resource_upcoming_idx;
DROP INDEX builds_resource_holder_idx;
ALTER TABLE builds DROP COLUMN resource_group_id;
UPDATE builds SET status = 'pending' WHERE status = 'waiting_for_resource';
ALTER TABLE builds DROP CONSTRAINT builds_status_check,
    ADD CONSTRAINT builds_status_check
        CHECK (status IN ('created', 'manual', 'scheduled', 'pending', 'waiting_for_runner_ack', 'running',
                          'canceling', 'success', 'failed', 'canceled', 'skipped')) NOT VALID;
DROP TABLE resource_groups;
