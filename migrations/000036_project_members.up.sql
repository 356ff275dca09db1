-- Project members, GitLab's: a user's role on a project (10 guest, 20 reporter, 30 developer,
-- 40 maintainer, 50 owner). Every permission check reads its row on every request, by the
-- primary key, so a removed member is refused at once on every replica. expires_at is a date:
-- the membership ends when that day begins.
CREATE TABLE project_members (
    project_id    bigint      NOT NULL REFERENCES projects (id) ON DELETE CASCADE,
    user_id       bigint      NOT NULL REFERENCES users (id) ON DELETE CASCADE,
    access_level  int         NOT NULL CHECK (access_level IN (10, 20, 30, 40, 50)),
    expires_at    date,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (project_id, user_id)
);
-- A user's projects (GET /projects for a user).
CREATE INDEX project_members_user_idx ON project_members (user_id, project_id);
