"""python-gitlab's calls on trigger tokens and pipeline schedules against a jobapi
(TestPythonGitlabTriggersAndSchedules).

Arguments: the base URL, the admin token, a project id whose repository's main has a
.gitlab-ci.yml.
"""
import sys

import gitlab

gl = gitlab.Gitlab(sys.argv[1], private_token=sys.argv[2])
project = gl.projects.get(int(sys.argv[3]), lazy=True)

assert project.triggers.list() == []
trigger = project.triggers.create({"description": "deploy"})
token = trigger.token
assert token.startswith("glptt-") and trigger.description == "deploy", trigger.attributes
listed = project.triggers.list()
assert [t.id for t in listed] == [trigger.id] and listed[0].token == token[-4:], [t.attributes for t in listed]
pipeline = project.trigger_pipeline("main", token, variables={"DEPLOY_TO": "staging"})
assert pipeline.source == "trigger" and pipeline.ref == "main", pipeline.attributes
project.triggers.delete(trigger.id)
assert project.triggers.list() == []
try:
    project.trigger_pipeline("main", token)
    raise AssertionError("a deleted trigger token started a pipeline")
except gitlab.exceptions.GitlabCreateError as e:
    assert e.response_code == 404, e.response_code

assert project.pipelineschedules.list() == []
schedule = project.pipelineschedules.create(
    {"description": "nightly", "ref": "main", "cron": "0 2 * * *", "cron_timezone": "Europe/Berlin"})
assert schedule.active and schedule.cron_timezone == "Europe/Berlin" and schedule.next_run_at, schedule.attributes
schedule.variables.create({"key": "NIGHTLY", "value": "yes"})
assert [s.id for s in project.pipelineschedules.list()] == [schedule.id]
schedule_id = schedule.id  # play() replaces the object's attributes with GitLab's answer
played = schedule.play()
assert played["message"] == "201 Created", played
got = project.pipelineschedules.get(schedule_id)
assert got.last_pipeline["id"] == played["pipeline_id"], got.attributes
assert got.attributes["variables"] == [{"key": "NIGHTLY", "value": "yes", "variable_type": "env_var"}], got.attributes
# python-gitlab 3.12 has no manager for it yet: the raw call, as a script would make it.
listed = gl.http_list("/projects/%s/pipeline_schedules/%d/pipelines" % (project.id, schedule_id))
assert [p["id"] for p in listed] == [played["pipeline_id"]], listed
assert gl.http_get("/projects/%s/pipelines/%d" % (project.id, played["pipeline_id"]))["source"] == "schedule"
try:
    project.pipelineschedules.create({"description": "bad", "ref": "main", "cron": "0 25 * * *"})
    raise AssertionError("a bad cron was taken")
except gitlab.exceptions.GitlabCreateError as e:
    assert e.response_code == 400 and "cron" in str(e.error_message), (e.response_code, e.error_message)
got.delete()
assert project.pipelineschedules.list() == []
print("ok")
