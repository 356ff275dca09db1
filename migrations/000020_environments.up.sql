-- .gitlab-ci.yml's environment (issue 17): a project's environments, created when a
-- pipeline first names them, and a deployment for each job that deploys to one (action
-- start; a retry gets its own). A deployment's status and finished_at are its build's,
-- read through build_id: a job and its deployment cannot disagree, and no build state
-- change needs a second write. state changes when a deploy or a stop job succeeds (in the
-- finish transaction). Like pipelines, they do not reference projects: project 100 and
-- other implicit projects have no row.
CREATE TABLE environments (
    id           bigserial PRIMARY KEY,
    project_id   bigint NOT NULL,
    name         text NOT NULL,
    slug         text NOT NULL,
    external_url text,
    state        text NOT NULL DEFAULT 'available' CHECK (state IN ('available', 'stopped')),
    tier         text NOT NULL,
    created_at   timestamptz NOT NULL,
    updated_at   timestamptz NOT NULL,
    UNIQUE (project_id, name)
);

CREATE TABLE deployments (
    id             bigserial PRIMARY KEY,
    project_id     bigint NOT NULL,
    environment_id bigint NOT NULL REFERENCES environments (id) ON DELETE CASCADE,
    build_id       bigint NOT NULL UNIQUE REFERENCES builds (id) ON DELETE CASCADE,
    ref            text NOT NULL,
    sha            text NOT NULL,
    created_at     timestamptz NOT NULL
);

CREATE INDEX deployments_project_idx ON deployments (project_id, id);
CREATE INDEX deployments_environment_idx ON deployments (environment_id, id);
