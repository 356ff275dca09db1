-- Project webhooks (GitLab's project hooks). token is kept as given: it is sent in
-- X-Gitlab-Token, and no answer shows it. since_event_id: the build_events id when the hook
-- was created; it receives the events after it, none from before.
CREATE TABLE project_hooks (
    id                         bigserial   PRIMARY KEY,
    project_id                 bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    uuid                       text        NOT NULL,
    url                        text        NOT NULL,
    name                       text        NOT NULL DEFAULT '',
    description                text        NOT NULL DEFAULT '',
    token                      text        NOT NULL DEFAULT '',
    push_events                boolean     NOT NULL DEFAULT true,
    tag_push_events            boolean     NOT NULL DEFAULT false,
    pipeline_events            boolean     NOT NULL DEFAULT false,
    job_events                 boolean     NOT NULL DEFAULT false,
    push_events_branch_filter  text        NOT NULL DEFAULT '',
    branch_filter_strategy     text        NOT NULL DEFAULT 'wildcard'
                               CHECK (branch_filter_strategy IN ('wildcard', 'regex', 'all_branches')),
    enable_ssl_verification    boolean     NOT NULL DEFAULT true,
    since_event_id             bigint      NOT NULL DEFAULT 0,
    created_at                 timestamptz NOT NULL,
    updated_at                 timestamptz NOT NULL
);
CREATE INDEX project_hooks_project_idx ON project_hooks (project_id, id);

-- Where a project's commit statuses go: its forge's API. token is kept as given (it
-- authenticates to the forge) and no answer, log line or error shows it.
CREATE TABLE forge_status_settings (
    project_id      bigint      PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    forge           text        NOT NULL CHECK (forge IN ('github', 'gitea', 'gitlab')),
    api_url         text        NOT NULL,
    repository      text        NOT NULL,
    token           text        NOT NULL,
    context         text        NOT NULL,
    since_event_id  bigint      NOT NULL DEFAULT 0,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);

-- The outbox: one row per hook (or the project's forge status, hook_id NULL) and event.
-- (project_id, target, dedupe_key) is unique, so that every replica's pass may find the
-- same event and one row is written. next_attempt_at is the deadline of record: a worker
-- claims a due row by moving it past its request timeout (the lease), so no other replica
-- sends it meanwhile, and a worker that died with it leaves it due again after the lease.
CREATE TABLE hook_deliveries (
    id               bigserial   PRIMARY KEY,
    project_id       bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    hook_id          bigint      REFERENCES project_hooks (id) ON DELETE CASCADE,
    target           text        NOT NULL,
    event            text        NOT NULL,
    dedupe_key       text        NOT NULL,
    uuid             text        NOT NULL,
    payload          jsonb       NOT NULL,
    state            text        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'delivered', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0,
    next_attempt_at  timestamptz NOT NULL,
    created_at       timestamptz NOT NULL,
    finished_at      timestamptz,
    UNIQUE (project_id, target, dedupe_key)
);
CREATE INDEX hook_deliveries_due_idx ON hook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX hook_deliveries_hook_idx ON hook_deliveries (hook_id, id);
CREATE INDEX hook_deliveries_finished_idx ON hook_deliveries (finished_at) WHERE state <> 'pending';

-- The delivery log: every attempt of every delivery, what the operator reads.
CREATE TABLE hook_delivery_attempts (
    delivery_id    bigint           NOT NULL REFERENCES hook_deliveries (id) ON DELETE CASCADE,
    attempt        integer          NOT NULL,
    url            text             NOT NULL,
    started_at     timestamptz      NOT NULL,
    duration_ms    double precision NOT NULL,
    status_code    integer,
    error          text             NOT NULL DEFAULT '',
    response_body  text             NOT NULL DEFAULT '',
    PRIMARY KEY (delivery_id, attempt)
);

-- How far the event pass has read build_events: every id up to safe_id is done; seen_id
-- is the highest id read at seen_at, which becomes safe once a settling time has passed
-- (a transaction that took its id earlier may commit a moment later).
CREATE TABLE hook_event_cursor (
    one      boolean     PRIMARY KEY DEFAULT true CHECK (one),
    safe_id  bigint      NOT NULL,
    seen_id  bigint      NOT NULL,
    seen_at  timestamptz NOT NULL
);
INSERT INTO hook_event_cursor (safe_id, seen_id, seen_at)
SELECT coalesce(max(id), 0), coalesce(max(id), 0), now() FROM build_events;
