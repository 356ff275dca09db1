-- How pushes reach a project. webhook_secret is kept as given, because HMAC (GitHub,
-- Gitea) needs the secret itself to verify a signature; no answer shows it. A project
-- polls its remote every poll_interval_seconds (0: never); next_poll_at is the deadline
-- of record: the pass whose UPDATE moves it past now polls, alone, until then. polled_at
-- NULL: the next poll records the remote's heads without starting pipelines.
CREATE TABLE push_settings (
    project_id             bigint      PRIMARY KEY REFERENCES projects (id) ON DELETE CASCADE,
    webhook_secret         text        NOT NULL DEFAULT '',
    poll_interval_seconds  integer     NOT NULL DEFAULT 0 CHECK (poll_interval_seconds >= 0),
    next_poll_at           timestamptz NOT NULL DEFAULT now(),
    polled_at              timestamptz,
    poll_error             text        NOT NULL DEFAULT '',
    updated_at             timestamptz NOT NULL DEFAULT now()
);
-- The poll pass's scan: projects that poll, in order of their next poll.
CREATE INDEX push_settings_due_idx ON push_settings (next_poll_at) WHERE poll_interval_seconds > 0;

-- The heads a project's polls saw, by full ref name. A head moves by compare-and-set
-- (UPDATE … WHERE sha = the one read): of the replicas that saw the same push, one moves
-- it and creates its pipeline.
CREATE TABLE push_heads (
    project_id  bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    ref         text        NOT NULL,
    sha         text        NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, ref)
);

-- Webhook deliveries received, by the forge's delivery id: the primary key makes a
-- replayed delivery create nothing again, on any replica. pipeline_id: what it created
-- (NULL: nothing, or not yet).
CREATE TABLE webhook_deliveries (
    project_id   bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    forge        text        NOT NULL,
    delivery_id  text        NOT NULL,
    event        text        NOT NULL,
    received_at  timestamptz NOT NULL,
    pipeline_id  bigint,
    PRIMARY KEY (project_id, forge, delivery_id)
);
CREATE INDEX webhook_deliveries_received_idx ON webhook_deliveries (received_at);
