-- artifacts:access (all, developer, none; public: false is developer) and artifacts:expose_as
-- (issue 17), copied from the job's definition when the runner uploads the artifact, as
-- GitLab keeps ci_job_artifacts.accessibility: none refuses the operator's downloads while
-- the runners of dependent jobs still fetch the archive.
ALTER TABLE job_artifacts
    ADD COLUMN access    text NOT NULL DEFAULT 'all' CHECK (access IN ('all', 'developer', 'none')),
    ADD COLUMN expose_as text CHECK (expose_as IS NULL OR (file_type = 'archive' AND length(expose_as) BETWEEN 1 AND 100));
