"""python-gitlab's calls on pipelines against a jobapi (TestPythonGitlabPipelines), as a team's
script makes them: create from a ref (the .gitlab-ci.yml read from the repository), list with
filters and pages, variables, cancel, retry, latest, delete.

Arguments: the base URL, the admin token, a project id whose repository has .gitlab-ci.yml on
main and a tag v1.0, and main's head commit.
"""
import sys

import gitlab

gl = gitlab.Gitlab(sys.argv[1], private_token=sys.argv[2])
project = gl.projects.get(int(sys.argv[3]), lazy=True)
head = sys.argv[4]

p = project.pipelines.create({"ref": "main", "variables": [{"key": "DEPLOY", "value": "yes"}]})
assert p.ref == "main" and p.sha == head and p.source == "api", p.attributes
assert p.status == "pending" and not p.tag and p.web_url.endswith("/pipelines/%d" % p.id), p.attributes
# The pipeline object's jobs (python-gitlab's p.jobs is the jobs manager).
assert sorted(j["name"] for j in p.attributes["jobs"]) == ["build", "deploy"], p.attributes  # deploy: rules see DEPLOY
tag = project.pipelines.create({"ref": "v1.0"})
assert tag.tag and tag.sha == head, tag.attributes

assert [x.id for x in project.pipelines.list(ref="main")] == [p.id]
assert [x.id for x in project.pipelines.list(scope="tags")] == [tag.id]
assert [x.id for x in project.pipelines.list(sha=head, sort="asc")] == [p.id, tag.id]
# One per page: get_all follows the Link header's rel="next".
assert [x.id for x in project.pipelines.list(status="pending", per_page=1, get_all=True)] == [tag.id, p.id]
assert project.pipelines.list(source="schedule") == []
try:
    project.pipelines.list(scope="everything")
    raise AssertionError("a bad scope was taken")
except gitlab.exceptions.GitlabListError as e:
    assert e.response_code == 400 and "scope" in str(e.error_message), (e.response_code, e.error_message)

assert [(v.key, v.value, v.variable_type) for v in p.variables.list()] == [("DEPLOY", "yes", "env_var")]

p.cancel()
p.refresh()
assert p.status == "canceled" and p.finished_at, p.attributes
p.retry()
p.refresh()
assert p.status == "pending", p.attributes
assert sorted((j["name"], j["status"]) for j in p.attributes["jobs"] if not j["retried_by"]) == [("build", "pending"), ("deploy", "created")], p.attributes

latest = project.pipelines.get("latest", ref="main")
assert latest.id == p.id and latest.started_at is None and latest.duration is None, latest.attributes
assert project.pipelines.get("latest", ref="v1.0").id == tag.id

p.cancel()
p.delete()
try:
    project.pipelines.get(p.id)
    raise AssertionError("a deleted pipeline was found")
except gitlab.exceptions.GitlabGetError as e:
    assert e.response_code == 404, e.response_code
assert project.pipelines.list(ref="main") == []

try:
    project.pipelines.create({"ref": "no-such-branch"})
    raise AssertionError("a pipeline was created for a ref the repository does not have")
except gitlab.exceptions.GitlabCreateError as e:
    assert e.response_code == 400 and "no-such-branch" in str(e.error_message), (e.response_code, e.error_message)
print("ok")
