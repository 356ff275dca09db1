-- Who made a trigger token or a pipeline schedule, as GitLab's `owner` shows it: the caller
-- the request resolved (a user, the admin token's holder), kept as pipelines' created_by is
-- (a snapshot, so a deleted user's token still names them). NULL for rows made before.
ALTER TABLE pipeline_triggers ADD COLUMN owner jsonb;
ALTER TABLE pipeline_schedules ADD COLUMN owner jsonb;
