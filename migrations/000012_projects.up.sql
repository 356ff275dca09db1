-- Projects that own a repository (issue 12). Pipelines keep their bare project_id: a
-- pipeline for an id without a row is an implicit project, as before, so no foreign key.
CREATE TABLE projects (
    id              bigserial   PRIMARY KEY,
    name            text        NOT NULL,
    path            text        NOT NULL UNIQUE,
    -- As the operator gave it, credentials included: the runner needs them. Every answer,
    -- log line and event shows it redacted.
    repo_url        text        NOT NULL DEFAULT '',
    default_branch  text        NOT NULL DEFAULT 'main',
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE project_variables (
    project_id     bigint  NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    key            text    NOT NULL CHECK (key ~ '^[A-Za-z0-9_]+$'),
    value          text    NOT NULL,
    masked         boolean NOT NULL DEFAULT false,
    protected      boolean NOT NULL DEFAULT false,
    variable_type  text    NOT NULL DEFAULT 'env_var' CHECK (variable_type IN ('env_var', 'file')),
    PRIMARY KEY (project_id, key)
);
