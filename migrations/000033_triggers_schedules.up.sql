-- Pipeline trigger tokens, GitLab's ci_triggers: a project's token (glptt-) that starts a
-- pipeline on a ref without the admin token. Only its SHA-256 is stored, and its last four
-- characters, which GitLab shows in place of the token after it was created.
CREATE TABLE pipeline_triggers (
    id           bigserial   PRIMARY KEY,
    project_id   bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    description  text        NOT NULL DEFAULT '',
    token_hash   bytea       NOT NULL UNIQUE,
    token_last4  text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    last_used    timestamptz
);
CREATE INDEX pipeline_triggers_project_idx ON pipeline_triggers (project_id, id);

-- Pipeline schedules, GitLab's ci_pipeline_schedules. next_run_at is the deadline of
-- record: the replica whose UPDATE moves it from the due time it read to the next one
-- creates that tick's pipeline, so each tick creates one pipeline across replicas.
CREATE TABLE pipeline_schedules (
    id               bigserial   PRIMARY KEY,
    project_id       bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    description      text        NOT NULL,
    ref              text        NOT NULL,
    cron             text        NOT NULL,
    cron_timezone    text        NOT NULL DEFAULT 'UTC',
    active           boolean     NOT NULL DEFAULT true,
    next_run_at      timestamptz NOT NULL,
    last_pipeline_id bigint,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX pipeline_schedules_project_idx ON pipeline_schedules (project_id, id);
-- The worker's scan: active schedules in order of their next tick.
CREATE INDEX pipeline_schedules_due_idx ON pipeline_schedules (next_run_at) WHERE active;

CREATE TABLE pipeline_schedule_variables (
    schedule_id    bigint NOT NULL REFERENCES pipeline_schedules (id) ON DELETE CASCADE,
    key            text   NOT NULL CHECK (key ~ '^[A-Za-z0-9_]+$'),
    value          text   NOT NULL,
    variable_type  text   NOT NULL DEFAULT 'env_var' CHECK (variable_type IN ('env_var', 'file')),
    PRIMARY KEY (schedule_id, key)
);

-- The pipelines each schedule started (GET …/pipeline_schedules/:id/pipelines). No foreign
-- key to pipelines: a deleted pipeline leaves a row that lists nothing.
CREATE TABLE pipeline_schedule_pipelines (
    schedule_id  bigint NOT NULL REFERENCES pipeline_schedules (id) ON DELETE CASCADE,
    pipeline_id  bigint NOT NULL,
    PRIMARY KEY (schedule_id, pipeline_id)
);
