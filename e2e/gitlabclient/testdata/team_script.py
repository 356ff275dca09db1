"""A team's script on python-gitlab (Debian's python3-gitlab 3.12) against `jobapi dev`
(TestTeamScript): every call of issue 26's table, on pipelines whose jobs really ran.

Arguments: the base URL, the admin token, the repository's URL, main's and feature's head
commits, and the id of dev's demo runner. The repository's .gitlab-ci.yml has build (an
archive out/VERSION holding its pipeline's id), unit and lint.

What a script does not do itself it asks of the test, one JSON line each way (ask()): "run"
runs the pending jobs (those named in fail fail) until the pipelines named are finished;
"push" commits to main and pushes. Every call and its answer is printed for the test's log.
"""
import datetime
import json
import sys
import time
import warnings

import gitlab

warnings.simplefilter("error", UserWarning)  # python-gitlab warns of a misconfigured URL or a cut list

base, token, repo_url, main_sha, feature_sha = sys.argv[1:6]
runner_id = int(sys.argv[6])


def note(call, answer):
    print("%s -> %s" % (call, answer), flush=True)


def ask(action, **kw):
    print("@@ " + json.dumps(dict(action=action, **kw)), flush=True)
    line = sys.stdin.readline()
    if not line:
        raise SystemExit("the test stopped answering")
    return json.loads(line)


def run_jobs(project, pipelines, fail=()):
    ran = ask("run", project=project_id, pipelines=[p.id for p in pipelines], fail=list(fail))
    note("(the runner ran)", ["%s #%d %s" % (j["name"], j["id"], j["status"]) for j in ran])
    return ran


def ids(objs):
    return [o.id for o in objs]


def parse_time(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))


def expect_error(what, call, code, exc=gitlab.exceptions.GitlabError):
    try:
        call()
    except exc as e:
        assert e.response_code == code, (what, e.response_code, e.error_message)
        note(what, "%d %s" % (e.response_code, e.error_message))
        return
    raise AssertionError("%s: no error, want %d" % (what, code))


gl = gitlab.Gitlab(base, private_token=token)

# Who and what: GET /user, GET /version.
gl.auth()
assert gl.user.username == "admin" and gl.user.is_admin is True, gl.user.attributes
note("gl.auth(); gl.user", "id %d %s is_admin=%s" % (gl.user.id, gl.user.username, gl.user.is_admin))
version, revision = gl.version()
assert version not in ("", "unknown") and revision not in ("", "unknown"), (version, revision)
note("gl.version()", (version, revision))

created = gl.projects.create({"name": "app", "repo_url": repo_url})
note("gl.projects.create({name, repo_url})", "project %d %s" % (created.id, created.path_with_namespace))
# Scripts name a project by its path: GitLab's API takes it, URL-encoded, for the id.
got = gl.projects.get("jobapi/app")
assert got.id == created.id and got.path_with_namespace == "jobapi/app", got.attributes
note('gl.projects.get("jobapi/app")', "project %d" % got.id)
expect_error('gl.projects.get("jobapi/none")', lambda: gl.projects.get("jobapi/none"), 404)
# Without a token, a path that exists and one that does not get the same answer.
for path in ("jobapi%2Fapp", "jobapi%2Fnone"):
    resp = gl.session.__class__().get("%s/api/v4/projects/%s/pipelines" % (base, path))
    assert resp.status_code == 401, (path, resp.status_code, resp.text)
# lazy: no request; every call below goes to /projects/jobapi%2Fapp/….
project = gl.projects.get("jobapi/app", lazy=True)
project_id = created.id

# 1. A pipeline from the repository: the .gitlab-ci.yml read at main's head.
p1 = project.pipelines.create({"ref": "main", "variables": [{"key": "RELEASE", "value": "yes"}]})
assert p1.ref == "main" and p1.sha == main_sha and p1.source == "api" and p1.tag is False, p1.attributes
assert p1.status in ("created", "pending") and p1.started_at is None and p1.duration is None, p1.attributes
assert p1.web_url == "%s/projects/%d/pipelines/%d" % (base, project_id, p1.id), p1.web_url  # its page in the web UI
note('project.pipelines.create({"ref": "main", variables})', "pipeline %d %s sha %s" % (p1.id, p1.status, p1.sha[:8]))
variables = p1.variables.list()
assert [(v.key, v.value, v.variable_type) for v in variables] == [("RELEASE", "yes", "env_var")], [v.attributes for v in variables]
note("pipeline.variables.list()", [(v.key, v.value) for v in variables])

# Its jobs run; lint fails.
ran = run_jobs(project, [p1], fail=["lint"])
by_name = {j["name"]: j for j in ran}
assert sorted(by_name) == ["build", "lint", "unit"], ran
build, unit, lint1 = by_name["build"]["id"], by_name["unit"]["id"], by_name["lint"]["id"]
p1.refresh()
assert p1.status == "failed", p1.attributes
assert p1.started_at and p1.finished_at and parse_time(p1.started_at) <= parse_time(p1.finished_at), p1.attributes
assert p1.duration is not None and p1.duration >= 0, p1.attributes
assert p1.queued_duration is not None and p1.queued_duration >= 0, p1.attributes
note("pipeline.refresh()", "status %s started_at %s duration %s queued_duration %s" % (p1.status, p1.started_at, p1.duration, p1.queued_duration))

jobs = p1.jobs.list()
assert sorted((j.name, j.status) for j in jobs) == [("build", "success"), ("lint", "failed"), ("unit", "success")], [j.attributes for j in jobs]
for j in jobs:
    assert j.web_url == "%s/jobapi/app/-/jobs/%d" % (base, j.id), j.web_url
    assert j.duration is not None and j.duration > 0, j.attributes
    assert j.queued_duration is not None and j.queued_duration >= 0, j.attributes
    assert j.started_at and j.finished_at and j.pipeline["id"] == p1.id and j.runner["id"] == runner_id, j.attributes
# web_url is GitLab's path, which the web UI sends on to its job page (a signed-in browser).
browser = gl.session.__class__()
resp = browser.post(base + "/sign_in", data={"token": token}, allow_redirects=False)
assert resp.status_code == 303, (resp.status_code, resp.text[:200])
resp = browser.get(jobs[0].web_url, allow_redirects=False)
assert resp.status_code == 302 and resp.headers["Location"] == "/projects/%d/jobs/%d" % (project_id, jobs[0].id), (resp.status_code, resp.headers)
assert browser.get(jobs[0].web_url).status_code == 200
resp = browser.get(jobs[0].pipeline["web_url"], allow_redirects=False)
assert resp.headers["Location"] == "/projects/%d/pipelines/%d" % (project_id, p1.id), (resp.status_code, resp.headers)
note("GET job.web_url, job.pipeline['web_url'] in a signed-in browser", "302 to %s, %s" % ("/projects/%d/jobs/%d" % (project_id, jobs[0].id), resp.headers["Location"]))
note("pipeline.jobs.list()", [(j.name, j.status, round(j.duration, 3), round(j.queued_duration, 3)) for j in jobs])
assert ids(p1.jobs.list(scope="failed")) == [lint1]
note('pipeline.jobs.list(scope="failed")', [lint1])
assert ids(project.jobs.list(scope=["failed"])) == [lint1]
note('project.jobs.list(scope=["failed"])', [lint1])

# Retried: lint runs again and succeeds; the failed attempt leaves the pipeline's lists.
p1.retry()
p1.refresh()
assert p1.status in ("pending", "running"), p1.attributes
note("pipeline.retry(); pipeline.refresh()", p1.status)
ran = run_jobs(project, [p1])
assert [(j["name"], j["status"]) for j in ran] == [("lint", "success")], ran
lint2 = ran[0]["id"]
p1.refresh()
assert p1.status == "success" and p1.duration is not None, p1.attributes
note("pipeline.refresh()", "%s duration %s" % (p1.status, p1.duration))
assert p1.jobs.list(scope="failed") == []
note('pipeline.jobs.list(scope="failed")', [])
assert ids(p1.jobs.list(scope="failed", include_retried=True)) == [lint1]
note('pipeline.jobs.list(scope="failed", include_retried=True)', [lint1])
assert sorted(ids(p1.jobs.list())) == sorted([build, unit, lint2])
assert sorted(ids(p1.jobs.list(include_retried=True))) == sorted([build, unit, lint1, lint2])
all_jobs = project.jobs.list(get_all=True)
assert ids(all_jobs) == sorted([build, unit, lint1, lint2], reverse=True), ids(all_jobs)
note("project.jobs.list(get_all=True)", ids(all_jobs))
assert ids(project.jobs.list(scope=["failed", "success"])) == ids(all_jobs)
assert ids(project.jobs.list(scope=["success"])) == sorted([lint2, unit, build], reverse=True)
note('project.jobs.list(scope=["success"])', ids(project.jobs.list(scope=["success"])))
assert project.jobs.list(scope=["canceled", "running"]) == []
expect_error('project.jobs.list(scope="bogus")', lambda: project.jobs.list(scope="bogus"), 400)

# A job's log, and how long it is without reading it.
job = project.jobs.get(build)
trace = job.trace()
assert b"running build of pipeline %d" % p1.id in trace, trace
note("project.jobs.get(build).trace()", trace)
resp = gl.session.head("%s/api/v4/projects/%s/jobs/%d/trace" % (base, "jobapi%2Fapp", build), headers={"PRIVATE-TOKEN": token})
assert resp.status_code == 200 and resp.content == b"" and int(resp.headers["Content-Length"]) == len(trace), (resp.status_code, resp.headers)
note("HEAD /projects/:id/jobs/:id/trace (gl.session.head)", "%d Content-Length %s" % (resp.status_code, resp.headers["Content-Length"]))

# Artifacts of main's latest successful pipeline, by ref.
archive = project.artifacts.download(ref_name="main", job="build")
assert archive[:2] == b"PK" and archive == job.artifacts(), archive[:20]
note('project.artifacts.download(ref_name="main", job="build")', "%d bytes, the same as job.artifacts()" % len(archive))
version_file = project.artifacts.raw("main", "out/VERSION", "build")
assert version_file == b"%d\n" % p1.id, version_file
note('project.artifacts.raw("main", "out/VERSION", "build")', version_file)
expect_error('project.artifacts.download(ref_name="main", job="unit")', lambda: project.artifacts.download(ref_name="main", job="unit"), 404)

# The commit's statuses: one per latest job; every attempt with all.
commit = project.commits.get(main_sha, lazy=True)
statuses = commit.statuses.list()
assert sorted((s.name, s.status, s.id) for s in statuses) == sorted([("build", "success", build), ("unit", "success", unit), ("lint", "success", lint2)]), \
    [s.attributes for s in statuses]
for s in statuses:
    assert s.sha == main_sha and s.ref == "main" and s.pipeline_id == p1.id and s.target_url == "%s/jobapi/app/-/jobs/%d" % (base, s.id), s.attributes
note("project.commits.get(sha).statuses.list()", [(s.name, s.status) for s in statuses])
assert [s.id for s in commit.statuses.list(query_parameters={"all": "true", "name": "lint"})] == [lint1, lint2]
note('commit.statuses.list(all, name="lint")', [lint1, lint2])

# Runners: dev's demo runner, which ran the jobs.
runners = project.runners.list()
assert ids(runners) == [runner_id] and runners[0].status == "online" and runners[0].is_shared, [r.attributes for r in runners]
note("project.runners.list()", [(r.id, r.status, r.runner_type) for r in runners])
assert ids(gl.runners.all()) == [runner_id] and ids(gl.runners.all(status="online")) == [runner_id]
assert gl.runners.all(status="offline") == [] and gl.runners.all(type="project_type") == []
note("gl.runners.all() / (status=online) / (status=offline)", ([runner_id], [runner_id], []))

# More pipelines to filter: feature, a tag-less second commit by polling, a trigger, a schedule.
p_feature = project.pipelines.create({"ref": "feature"})
assert p_feature.sha == feature_sha, p_feature.attributes
note('project.pipelines.create({"ref": "feature"})', "pipeline %d" % p_feature.id)

trigger = project.triggers.create({"description": "deploy"})
assert trigger.token.startswith("glptt-") and trigger.description == "deploy", trigger.attributes
note('project.triggers.create({"description": "deploy"})', "trigger %d token %s…" % (trigger.id, trigger.token[:10]))
listed = project.triggers.list()
assert ids(listed) == [trigger.id] and listed[0].token == trigger.token[-4:], [t.attributes for t in listed]
note("project.triggers.list()", [(t.id, t.token) for t in listed])
p_trigger = project.trigger_pipeline("main", trigger.token, variables={"DEPLOY_TO": "staging"})
assert p_trigger.source == "trigger" and p_trigger.sha == main_sha, p_trigger.attributes
assert [(v.key, v.value) for v in project.pipelines.get(p_trigger.id, lazy=True).variables.list()] == [("DEPLOY_TO", "staging")]
note('project.trigger_pipeline("main", token, variables)', "pipeline %d source %s" % (p_trigger.id, p_trigger.source))
project.triggers.delete(trigger.id)
assert project.triggers.list() == []
note("project.triggers.delete(id)", "gone")
expect_error('project.trigger_pipeline("main", deleted token)', lambda: project.trigger_pipeline("main", trigger.token), 404)

schedule = project.pipelineschedules.create({"description": "nightly", "ref": "main", "cron": "0 2 * * *", "cron_timezone": "Europe/Berlin"})
assert schedule.active and schedule.next_run_at and schedule.cron_timezone == "Europe/Berlin", schedule.attributes
note("project.pipelineschedules.create({...})", "schedule %d next_run_at %s" % (schedule.id, schedule.next_run_at))
schedule.variables.create({"key": "NIGHTLY", "value": "yes"})
note('schedule.variables.create({"key": "NIGHTLY"})', "created")
assert ids(project.pipelineschedules.list()) == [schedule.id]
note("project.pipelineschedules.list()", [schedule.id])
schedule_id = schedule.id
played = schedule.play()
assert played["message"] == "201 Created", played
p_schedule = project.pipelines.get(played["pipeline_id"])
assert p_schedule.source == "schedule" and p_schedule.ref == "main", p_schedule.attributes
note("schedule.play()", played)
got = project.pipelineschedules.get(schedule_id)
assert got.last_pipeline["id"] == p_schedule.id and got.attributes["variables"] == [{"key": "NIGHTLY", "value": "yes", "variable_type": "env_var"}], got.attributes
note("project.pipelineschedules.get(id)", "last_pipeline %d variables %s" % (got.last_pipeline["id"], got.attributes["variables"]))
got.delete()
assert project.pipelineschedules.list() == []
note("schedule.delete()", "gone")

# They run to the end before the push: a push to main would cancel main's pending
# pipelines of an older commit (GitLab's auto-cancel of redundant pipelines).
run_jobs(project, [p_feature, p_trigger, p_schedule])

# A push by polling: turned on, its first poll records the heads; a push then is a pipeline.
settings = gl.http_put("/projects/%d/push_settings" % project_id, post_data={"poll_interval": 60})
note("PUT /projects/:id/push_settings poll_interval=60 (gl.http_put)", settings.get("poll_interval"))
deadline = time.time() + 60
while not gl.http_get("/projects/%d/push_settings" % project_id).get("polled_at"):
    assert time.time() < deadline, "no first poll within 60 s"
    time.sleep(0.1)
pushed = ask("push", change="second")["sha"]
polled = gl.http_post("/projects/%d/push_settings/poll" % project_id)
note("POST /projects/:id/push_settings/poll (gl.http_post)", polled)
listed = project.pipelines.list(source="push")
assert len(listed) == 1 and listed[0].sha == pushed and listed[0].ref == "main", [p.attributes for p in listed]
p_push = project.pipelines.get(listed[0].id)  # a list's pipelines are GitLab's short form, without before_sha
assert p_push.before_sha == main_sha and p_push.source == "push", p_push.attributes
note('project.pipelines.list(source="push")', "pipeline %d sha %s before_sha %s" % (p_push.id, p_push.sha[:8], p_push.before_sha[:8]))

run_jobs(project, [p_push])
for p in (p_feature, p_trigger, p_schedule, p_push):
    p.refresh()
    assert p.status == "success" and p.started_at and p.duration is not None and p.queued_duration is not None, p.attributes

# 2. Lists filter as GitLab's: newest first; by scope, status, ref, sha, source, updated_after.
everything = [p_push.id, p_schedule.id, p_trigger.id, p_feature.id, p1.id]
assert ids(project.pipelines.list()) == everything, ids(project.pipelines.list())
note("project.pipelines.list()", everything)
for p in project.pipelines.list():
    assert p.web_url.endswith("/pipelines/%d" % p.id) and p.status == "success" and p.updated_at, p.attributes
assert ids(project.pipelines.list(sort="asc")) == everything[::-1]
assert ids(project.pipelines.list(order_by="id", sort="asc", per_page=2, get_all=True)) == everything[::-1]
note('project.pipelines.list(order_by="id", sort="asc", per_page=2, get_all=True)', everything[::-1])
by_updated = project.pipelines.list(order_by="updated_at", sort="desc")
assert [p.updated_at for p in by_updated] == sorted((p.updated_at for p in by_updated), reverse=True), [(p.id, p.updated_at) for p in by_updated]
note('project.pipelines.list(order_by="updated_at")', [(p.id, p.updated_at) for p in by_updated])
assert ids(project.pipelines.list(ref="feature")) == [p_feature.id]
note('project.pipelines.list(ref="feature")', [p_feature.id])
assert ids(project.pipelines.list(ref="main")) == [p_push.id, p_schedule.id, p_trigger.id, p1.id]
assert ids(project.pipelines.list(sha=main_sha)) == [p_schedule.id, p_trigger.id, p1.id]
note("project.pipelines.list(sha=main)", [p_schedule.id, p_trigger.id, p1.id])
for source, want in (("api", [p_feature.id, p1.id]), ("trigger", [p_trigger.id]), ("schedule", [p_schedule.id]), ("push", [p_push.id]), ("web", [])):
    got_ids = ids(project.pipelines.list(source=source))
    assert got_ids == want, (source, got_ids, want)
    note('project.pipelines.list(source="%s")' % source, got_ids)
# scope=branches: as GitLab, each branch's latest pipeline.
for kw, want in (({"status": "success"}, everything), ({"status": "failed"}, []), ({"scope": "running"}, []),
                 ({"scope": "finished"}, everything), ({"scope": "branches"}, [p_push.id, p_feature.id]), ({"scope": "tags"}, [])):
    got_ids = ids(project.pipelines.list(**kw))
    assert got_ids == want, (kw, got_ids, want)
    note("project.pipelines.list(%s)" % ", ".join('%s="%s"' % kv for kv in kw.items()), got_ids)
# updated_after: those updated since the feature pipeline was (GitLab: strictly after).
since = max(p.updated_at for p in by_updated if p.id == p_feature.id)
later = ids(project.pipelines.list(updated_after=since))
assert p_feature.id not in later and p1.id not in later and set(later) == {p.id for p in by_updated if p.updated_at > since}, (since, later, by_updated)
note("project.pipelines.list(updated_after=%s)" % since, later)
assert ids(project.pipelines.list(updated_after=datetime.datetime.now(datetime.timezone.utc).isoformat())) == []
expect_error('project.pipelines.list(scope="everything")', lambda: project.pipelines.list(scope="everything"), 400)

latest = project.pipelines.get("latest", ref="main")
assert latest.id == p_push.id and latest.started_at and latest.duration is not None, latest.attributes
note('project.pipelines.get("latest", ref="main")', "pipeline %d" % latest.id)
assert project.pipelines.get("latest", ref="feature").id == p_feature.id

# Artifacts by ref follow main's newest successful pipeline.
assert project.artifacts.raw("main", "out/VERSION", "build") == b"%d\n" % p_push.id
note('project.artifacts.raw("main", "out/VERSION", "build") after the push', b"%d\n" % p_push.id)

# Deleting a finished pipeline.
p_feature.delete()
expect_error("project.pipelines.get(deleted)", lambda: project.pipelines.get(p_feature.id), 404, gitlab.exceptions.GitlabGetError)
assert project.pipelines.list(ref="feature") == []
note("pipeline.delete() of a finished pipeline", "then 404, and not listed")

# 6. Hooks: create, list, delete (deliveries are hooktest's).
hook = project.hooks.create({"url": "https://ci.example.com/hook", "token": "secret", "pipeline_events": True, "job_events": True, "push_events": False})
assert hook.pipeline_events and hook.job_events and not hook.push_events and "token" not in hook.attributes, hook.attributes
note("project.hooks.create({url, token, pipeline_events, job_events})", "hook %d" % hook.id)
assert ids(project.hooks.list()) == [hook.id]
note("project.hooks.list()", [hook.id])
project.hooks.delete(hook.id)
assert project.hooks.list() == []
note("project.hooks.delete(id)", "gone")
print("ok")
