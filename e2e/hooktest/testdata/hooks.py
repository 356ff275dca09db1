"""python-gitlab's calls on project webhooks against a jobapi (TestPythonGitlabHooks).

Arguments: the base URL, the admin token, a project id, a receiver URL.
"""
import sys

import gitlab

gl = gitlab.Gitlab(sys.argv[1], private_token=sys.argv[2])
project = gl.projects.get(int(sys.argv[3]), lazy=True)
url = sys.argv[4]

assert project.hooks.list() == []
hook = project.hooks.create({"url": url, "token": "py-secret-token", "pipeline_events": True,
                             "job_events": True, "push_events": False})
assert hook.url == url and hook.pipeline_events and hook.job_events and not hook.push_events, hook.attributes
assert "token" not in hook.attributes and hook.token_present, hook.attributes
listed = project.hooks.list()
assert [h.id for h in listed] == [hook.id] and "token" not in listed[0].attributes, [h.attributes for h in listed]
got = project.hooks.get(hook.id)
got.push_events_branch_filter = "release/*"
got.save()
assert project.hooks.get(hook.id).push_events_branch_filter == "release/*"
project.hooks.delete(hook.id)
assert project.hooks.list() == []
try:
    project.hooks.get(hook.id)
    raise AssertionError("a deleted hook was found")
except gitlab.exceptions.GitlabGetError as e:
    assert e.response_code == 404, e.response_code
print("ok")
