-- .gitlab-ci.yml's resource_group (issue 17): at most one job of a group holds it at a
-- time, across every pipeline of the project. A group is created when a pipeline first
-- names it; process_mode is GitLab's (PUT /projects/:id/resource_groups/:key). Like
-- environments, groups do not reference projects (implicit projects have no row).
CREATE TABLE resource_groups (
    id           bigserial PRIMARY KEY,
    project_id   bigint NOT NULL,
    key          text NOT NULL,
    process_mode text NOT NULL DEFAULT 'unordered'
                 CHECK (process_mode IN ('unordered', 'oldest_first', 'newest_first', 'newest_ready_first')),
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    UNIQUE (project_id, key)
);

-- waiting_for_resource: a job of a group released while another job holds the group.
-- NOT VALID as in 000013: the check is wider than the old one.
ALTER TABLE builds DROP CONSTRAINT builds_status_check,
    ADD CONSTRAINT builds_status_check
        CHECK (status IN ('created', 'manual', 'scheduled', 'waiting_for_resource', 'pending',
                          'waiting_for_runner_ack', 'running', 'canceling', 'success', 'failed',
                          'canceled', 'skipped')) NOT VALID;

ALTER TABLE builds ADD COLUMN resource_group_id bigint REFERENCES resource_groups (id);

-- The invariant itself: a group's holders are its builds from the moment the group is
-- assigned to them (pending, as GitLab's assign_resource_to) until they end, through the
-- claim (waiting_for_runner_ack or running) and a cancel (canceling). At most one per
-- group, whatever code path moves a build: a second holder is a unique violation, never a
-- double hold. It also answers "is the group free?" with one index probe.
CREATE UNIQUE INDEX builds_resource_holder_idx ON builds (resource_group_id)
    WHERE resource_group_id IS NOT NULL
      AND status IN ('pending', 'waiting_for_runner_ack', 'running', 'canceling');

-- A group's upcoming jobs (GitLab's waiting_for_resource_or_upcoming), in pipeline order.
CREATE INDEX builds_resource_upcoming_idx ON builds (resource_group_id, pipeline_id, id)
    WHERE resource_group_id IS NOT NULL AND status IN ('created', 'scheduled', 'waiting_for_resource');

-- Whether advance must look at resource groups: read with the pipeline's lock, so that
-- pipelines without any pay nothing.
ALTER TABLE pipelines ADD COLUMN resource_groups boolean NOT NULL DEFAULT false;
