-- What started a pipeline and what its jobs are told about it (issue 12): CI_PIPELINE_SOURCE,
-- CI_COMMIT_BEFORE_SHA, the pipeline's own variables, and CI_PIPELINE_IID.
ALTER TABLE pipelines
    ADD COLUMN source     text   NOT NULL DEFAULT 'api',
    ADD COLUMN before_sha text   NOT NULL DEFAULT '0000000000000000000000000000000000000000',
    -- [{key, value, file}]: pipeline variables rank above project and job variables.
    ADD COLUMN variables  jsonb  NOT NULL DEFAULT '[]',
    ADD COLUMN iid        bigint;

-- iid numbers a project's pipelines 1, 2, … as GitLab does; existing ones in creation order.
UPDATE pipelines p SET iid = n.iid
FROM (SELECT id, row_number() OVER (PARTITION BY project_id ORDER BY id) AS iid FROM pipelines) n
WHERE p.id = n.id;
ALTER TABLE pipelines ALTER COLUMN iid SET NOT NULL;
CREATE UNIQUE INDEX pipelines_project_iid_idx ON pipelines (project_id, iid);

-- The last iid handed out per project. An implicit project has no projects row, hence a
-- table of its own without a foreign key. The creating transaction bumps it with an upsert,
-- whose row lock makes concurrent creations for one project take turns for their number.
CREATE TABLE pipeline_iids (
    project_id  bigint PRIMARY KEY,
    last_iid    bigint NOT NULL
);
INSERT INTO pipeline_iids (project_id, last_iid)
SELECT project_id, max(iid) FROM pipelines GROUP BY project_id;
