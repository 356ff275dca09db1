-- Operator actions (runner and flag changes, cancels, retries) with who did them.
CREATE TABLE operator_events (
    id      bigserial PRIMARY KEY,
    at      timestamptz NOT NULL,
    actor   text        NOT NULL,
    action  text        NOT NULL,
    target  text        NOT NULL,
    detail  jsonb       NOT NULL DEFAULT '{}'
);
