"""python-gitlab's calls on protected branches and tags against a jobapi (TestPythonGitlabProtectedRefs).

Arguments: the base URL, the admin token, a project id whose default branch is main.
"""
import sys

import gitlab

gl = gitlab.Gitlab(sys.argv[1], private_token=sys.argv[2])
project = gl.projects.get(int(sys.argv[3]), lazy=True)

assert [b.name for b in project.protectedbranches.list()] == ["main"]
created = project.protectedbranches.create({"name": "release/*", "push_access_level": 40})
assert created.name == "release/*" and created.push_access_levels[0]["access_level"] == 40, created.attributes
got = project.protectedbranches.get("release/*")  # the name URL-encoded in the path
assert got.id == created.id, got.attributes
try:
    project.protectedbranches.create({"name": "release/*", "push_access_level": 40})
    raise AssertionError("a duplicate was created")
except gitlab.exceptions.GitlabCreateError as e:
    assert e.response_code == 409, e.response_code
tag = project.protectedtags.create({"name": "v*", "create_access_level": 30})
assert tag.create_access_levels[0]["access_level"] == 30, tag.attributes
assert [t.name for t in project.protectedtags.list()] == ["v*"]
got.delete()
project.protectedtags.delete("v*")
assert [b.name for b in project.protectedbranches.list()] == ["main"]
assert project.protectedtags.list() == []
try:
    project.protectedbranches.get("release/*")
    raise AssertionError("a deleted protected branch was found")
except gitlab.exceptions.GitlabGetError as e:
    assert e.response_code == 404, e.response_code
print("ok")
