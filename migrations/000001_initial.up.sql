-- Runners authenticate with a glrt- token; only its SHA-256 is stored.
CREATE TABLE runners (
    id            bigserial PRIMARY KEY,
    token_hash    bytea       NOT NULL UNIQUE,
    description   text        NOT NULL DEFAULT '',
    tags          text[]      NOT NULL DEFAULT '{}',
    run_untagged  boolean     NOT NULL DEFAULT true,
    paused        boolean     NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT now(),
    contacted_at  timestamptz
);

-- One row per machine (system_id) that uses a runner's token.
CREATE TABLE runner_managers (
    id            bigserial PRIMARY KEY,
    runner_id     bigint      NOT NULL REFERENCES runners (id) ON DELETE CASCADE,
    system_id     text        NOT NULL,
    version       text        NOT NULL DEFAULT '',
    revision      text        NOT NULL DEFAULT '',
    platform      text        NOT NULL DEFAULT '',
    architecture  text        NOT NULL DEFAULT '',
    executor      text        NOT NULL DEFAULT '',
    shell         text        NOT NULL DEFAULT '',
    features      jsonb       NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    contacted_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (runner_id, system_id)
);

CREATE TABLE pipelines (
    id                bigserial PRIMARY KEY,
    project_id        bigint      NOT NULL CHECK (project_id > 0),
    ref               text        NOT NULL,
    sha               text        NOT NULL,
    stages            text[]      NOT NULL,
    timeout_strategy  text        NOT NULL DEFAULT 'pessimistic'
                      CHECK (timeout_strategy IN ('pessimistic', 'optimistic')),
    status            text        NOT NULL
                      CHECK (status IN ('created', 'pending', 'running', 'success', 'failed', 'canceled')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    finished_at       timestamptz
);
CREATE INDEX pipelines_project_idx ON pipelines (project_id, id);

CREATE TABLE builds (
    id                 bigserial PRIMARY KEY,
    project_id         bigint      NOT NULL,
    pipeline_id        bigint      NOT NULL REFERENCES pipelines (id) ON DELETE CASCADE,
    stage              text        NOT NULL,
    stage_idx          integer     NOT NULL,
    name               text        NOT NULL,
    status             text        NOT NULL
                       CHECK (status IN ('created', 'pending', 'waiting_for_runner_ack', 'running',
                                         'canceling', 'success', 'failed', 'canceled', 'skipped')),
    -- SHA-256 of the job token; issued at assignment, so NULL until then.
    token_hash         bytea,
    tags               text[]      NOT NULL DEFAULT '{}',
    -- Everything the runner needs that is not a column: steps, variables, image, services, retry.
    payload            jsonb       NOT NULL,
    timeout_seconds    integer     NOT NULL CHECK (timeout_seconds > 0),
    allow_failure      boolean     NOT NULL DEFAULT false,
    runner_id          bigint      REFERENCES runners (id) ON DELETE SET NULL,
    runner_manager_id  bigint      REFERENCES runner_managers (id) ON DELETE SET NULL,
    attempt            integer     NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    -- UNIQUE: a build is retried at most once; the retry chain is a list, never a tree.
    retry_of           bigint      UNIQUE REFERENCES builds (id),
    retried_by         bigint      UNIQUE REFERENCES builds (id),
    -- Decided once at assignment, never re-evaluated (replicas may disagree mid-rollout).
    two_phase          boolean     NOT NULL DEFAULT false,
    cancel_requested   boolean     NOT NULL DEFAULT false,
    failure_reason     text,
    exit_code          integer,
    -- The final state the runner reported, so that a repeat of it is answered 200.
    runner_final_state text,
    trace_size         bigint      NOT NULL DEFAULT 0,
    created_at         timestamptz NOT NULL DEFAULT now(),
    queued_at          timestamptz,
    assigned_at        timestamptz,
    -- Deadline of record for the ack: the sweeper's index. Redis holds the live TTL.
    ack_deadline       timestamptz,
    started_at         timestamptz,
    finished_at        timestamptz,
    -- Last runner update (throttled) or state change.
    updated_at         timestamptz NOT NULL DEFAULT now()
);

-- The claim query walks pending builds oldest first.
CREATE INDEX builds_pending_idx ON builds (queued_at, id) WHERE status = 'pending';
-- The sweeper reads only expired waiting builds.
CREATE INDEX builds_waiting_ack_idx ON builds (ack_deadline) WHERE status = 'waiting_for_runner_ack';
-- Reapers.
CREATE INDEX builds_running_idx ON builds (updated_at) WHERE status IN ('running', 'canceling');
CREATE INDEX builds_pipeline_idx ON builds (pipeline_id, stage_idx);
CREATE INDEX builds_status_idx ON builds (status, id);

CREATE TABLE build_events (
    id                bigserial PRIMARY KEY,
    build_id          bigint      NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    type              text        NOT NULL,
    at                timestamptz NOT NULL,
    runner_manager    text        NOT NULL DEFAULT '',
    detail            jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX build_events_build_idx ON build_events (build_id, id);

-- Traces are stored as appended chunks: appending never rewrites what is already there.
CREATE TABLE build_trace_chunks (
    build_id   bigint NOT NULL REFERENCES builds (id) ON DELETE CASCADE,
    offset_at  bigint NOT NULL,
    data       bytea  NOT NULL,
    PRIMARY KEY (build_id, offset_at)
);

CREATE TABLE feature_flags (
    name        text PRIMARY KEY,
    -- NULL: no boolean gate; true/false: on/off for everyone.
    enabled     boolean,
    percentage_of_actors integer CHECK (percentage_of_actors BETWEEN 0 AND 100),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE feature_flag_actors (
    name   text NOT NULL REFERENCES feature_flags (name) ON DELETE CASCADE,
    -- "project:<id>" or "runner:<id>"
    actor  text NOT NULL,
    PRIMARY KEY (name, actor)
);
