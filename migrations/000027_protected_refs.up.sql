-- Protected branches and tags, GitLab's protected_branches and protected_tags in
-- one table: a name or a wildcard pattern (release/*) per project and ref type. GitLab
-- protects a project's default branch when it creates the project; existing projects get that
-- row here, so that their default branch stays protected as it was before this table.
CREATE TABLE protected_refs (
    id                           bigserial   PRIMARY KEY,
    project_id                   bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    ref_type                     text        NOT NULL CHECK (ref_type IN ('branch', 'tag')),
    name                         text        NOT NULL,
    push_access_level            int         NOT NULL DEFAULT 40,
    merge_access_level           int         NOT NULL DEFAULT 40,
    create_access_level          int         NOT NULL DEFAULT 40,
    allow_force_push             boolean     NOT NULL DEFAULT false,
    code_owner_approval_required boolean     NOT NULL DEFAULT false,
    created_at                   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, ref_type, name)
);
INSERT INTO protected_refs (project_id, ref_type, name)
SELECT id, 'branch', default_branch FROM projects;

-- A runner's access_level, GitLab's: ref_protected runners take only builds of protected refs.
ALTER TABLE runners ADD COLUMN access_level text NOT NULL DEFAULT 'not_protected'
    CHECK (access_level IN ('not_protected', 'ref_protected'));

-- Whether a pipeline's ref is protected is decided when it is created and kept, as GitLab
-- keeps ci_pipelines.protected and ci_builds.protected: the claim reads the build's own flag
-- (no lookup), and a later change of the list does not flip a pipeline that runs.
ALTER TABLE pipelines ADD COLUMN protected boolean NOT NULL DEFAULT false;
ALTER TABLE builds ADD COLUMN protected boolean NOT NULL DEFAULT false;

-- Until now the default branch was the one protected ref (main for a project id without a
-- row): pipelines on it, and the builds that may still run, keep being protected.
UPDATE pipelines p SET protected = true
WHERE p.ref NOT LIKE 'refs/tags/%'
  AND regexp_replace(p.ref, '^refs/heads/', '') =
      COALESCE((SELECT pr.default_branch FROM projects pr WHERE pr.id = p.project_id), 'main');
UPDATE builds b SET protected = true
FROM pipelines p
WHERE p.id = b.pipeline_id AND p.protected
  AND b.status IN ('created', 'manual', 'scheduled', 'waiting_for_resource', 'pending',
                   'waiting_for_runner_ack', 'running', 'canceling');
