"""python-gitlab's list and read calls against a jobapi (TestPythonGitlabLists).

Arguments: the base URL, the admin token, the fixture's project id and commit, the ids of
its jobs build, test, lint's failed first attempt and lint's retry, and its runner's id.
The fixture: build succeeded with an archive holding out/VERSION (1.2.3), test failed
(allowed to), lint failed and succeeded on its retry; the pipeline on main succeeded.
"""
import sys
import warnings

import gitlab

warnings.simplefilter("error", UserWarning)  # gl.auth()'s misconfigured-URL warning fails the test

base, token, project_id, sha = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
build, test, lint_failed, lint, runner_id = (int(a) for a in sys.argv[5:10])

gl = gitlab.Gitlab(base, private_token=token)
project = gl.projects.get(project_id, lazy=True)

# Jobs: every attempt newest first; scope as one value or a list (scope[]=…).
jobs = project.jobs.list(get_all=True)
assert [j.id for j in jobs] == [lint, lint_failed, test, build], [j.id for j in jobs]
assert [j.id for j in project.jobs.list(scope="failed")] == [lint_failed, test]
assert [j.id for j in project.jobs.list(scope=["success", "canceled"])] == [lint, build]
for j in jobs:
    assert j.web_url == f"{base}/jobapi/app/-/jobs/{j.id}", j.web_url
    assert j.duration is not None and j.duration >= 0, j.attributes
    assert j.queued_duration is not None and j.queued_duration >= 0, j.attributes
    assert j.pipeline["sha"] == sha and j.pipeline["status"] == "success", j.pipeline
    assert j.runner["id"] == runner_id and j.runner["status"] == "online", j.runner
    assert j.ref == "main" and j.tag is False, (j.ref, j.tag)
page = project.jobs.list(per_page=3, page=2)
assert [j.id for j in page] == [build], [j.id for j in page]
try:
    project.jobs.list(scope="bogus")
    raise AssertionError("scope=bogus was accepted")
except gitlab.exceptions.GitlabListError as e:
    assert e.response_code == 400 and "bogus" in str(e.error_message), (e.response_code, e.error_message)

# A pipeline's jobs: by scope, retried attempts only with include_retried.
pipeline = project.pipelines.get(jobs[0].pipeline["id"], lazy=True)
assert [j.id for j in pipeline.jobs.list(scope="failed")] == [test]
assert [j.id for j in pipeline.jobs.list(scope="failed", include_retried=True)] == [test, lint_failed]

# Runners: the project's (every instance runner) and the instance's, with filters.
runners = project.runners.list()
assert [r.id for r in runners] == [runner_id], [r.attributes for r in runners]
assert runners[0].status == "online" and runners[0].is_shared and runners[0].runner_type == "instance_type"
assert [r.id for r in gl.runners.all(status="online")] == [runner_id]
assert gl.runners.all(status="offline") == []
assert [r.id for r in gl.runners.all(tag_list=["docker", "linux"])] == [runner_id]
assert gl.runners.all(type="group_type") == []
assert [r.id for r in gl.runners.list(status="online")] == [runner_id]  # GET /runners, filtered too

# Who and what: gl.auth() (GET /user), gl.version().
gl.auth()
assert gl.user.username == "admin" and gl.user.is_admin is True, gl.user.attributes
version, revision = gl.version()
assert version != "unknown" and revision != "unknown", (version, revision)

# A commit's statuses: its pipeline's latest jobs, all attempts with all=True, by name.
commit = project.commits.get(sha, lazy=True)
statuses = commit.statuses.list()
assert [(s.id, s.name, s.status) for s in statuses] == [(build, "build", "success"), (test, "test", "failed"), (lint, "lint", "success")], \
    [s.attributes for s in statuses]
assert statuses[1].allow_failure is True and statuses[1].ref == "main" and statuses[1].sha == sha
# python-gitlab takes all=True for "every page": GitLab's all goes in query_parameters.
assert [s.id for s in commit.statuses.list(query_parameters={"all": "true", "name": "lint"})] == [lint_failed, lint]
assert [s.id for s in commit.statuses.list(stage="build")] == [build]

# Artifacts by ref: the archive of the newest successful pipeline's job, and one file of it.
archive = project.artifacts.download(ref_name="main", job="build")
assert archive[:2] == b"PK", archive[:20]
assert archive == project.jobs.get(build, lazy=True).artifacts(), "by ref and by job id differ"
assert project.artifacts.raw("main", "out/VERSION", "build") == b"1.2.3\n"
try:
    project.artifacts.download(ref_name="main", job="test")
    raise AssertionError("test has no archive, yet one was downloaded")
except gitlab.exceptions.GitlabGetError as e:
    assert e.response_code == 404, e.response_code

# HEAD on a job's log: python-gitlab has no call for it; requests, as scripts use it.
resp = gl.session.head(f"{base}/api/v4/projects/{project_id}/jobs/{test}/trace", headers={"PRIVATE-TOKEN": token})
assert resp.status_code == 200 and resp.content == b"", (resp.status_code, resp.content)
print("ok")
