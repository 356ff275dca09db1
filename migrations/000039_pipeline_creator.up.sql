-- Who created a pipeline, as GitLab's pipeline and job objects show it in `user`: the
-- caller the request resolved (a user, the admin token's holder) or the machinery acting on
-- its own account (a trigger, a schedule, a webhook). NULL for pipelines created before.
ALTER TABLE pipelines ADD COLUMN created_by jsonb;
