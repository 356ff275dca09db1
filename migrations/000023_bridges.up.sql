-- trigger: (issue 17): a bridge job is a build that never goes to a runner. When it becomes
-- pending, a replica's bridge pass creates its child pipeline from the file trigger:include
-- names, in the transaction that moves the bridge on (downstream.Bridges, pgstore
-- CreateChild). The claims skip bridges (NOT bridge, a column so that the claim needs no
-- payload read); the partial index is the bridge pass's queue and what the reapers skip.
-- A child pipeline names the bridge build that created it: UNIQUE, so one bridge attempt
-- has one child whatever replicas race on it; a retried bridge is a new build with a child
-- of its own. depth: 0 for a pipeline started otherwise, its parent's + 1 for a child.
ALTER TABLE builds ADD COLUMN bridge boolean NOT NULL DEFAULT false;
CREATE INDEX builds_bridges_idx ON builds (queued_at, id) WHERE bridge AND status IN ('pending', 'running', 'canceling');

ALTER TABLE pipelines ADD COLUMN parent_build_id bigint REFERENCES builds (id) ON DELETE SET NULL;
ALTER TABLE pipelines ADD COLUMN depth smallint NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX pipelines_parent_build_idx ON pipelines (parent_build_id) WHERE parent_build_id IS NOT NULL;
