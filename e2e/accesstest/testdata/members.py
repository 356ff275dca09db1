# python-gitlab's project.members and members_all against jobapi, as a team script calls them:
# add, list, get, change, remove; a member's own token then sees the project, a removed one not.
import sys

import gitlab

url, admin_token, project_id, user_id, user_token = sys.argv[1:6]
gl = gitlab.Gitlab(url, private_token=admin_token)
project = gl.projects.get(int(project_id))

m = project.members.create({"user_id": int(user_id), "access_level": gitlab.const.AccessLevel.DEVELOPER})
assert m.access_level == 30 and m.username == "pyuser", m.attributes
assert [x.id for x in project.members.list()] == [int(user_id)]
assert [x.id for x in project.members_all.list(get_all=True)] == [int(user_id)]

m = project.members.get(int(user_id))
m.access_level = gitlab.const.AccessLevel.MAINTAINER
m.expires_at = "2999-12-31"
m.save()
m = project.members.get(int(user_id))
assert m.access_level == 40 and m.expires_at == "2999-12-31", m.attributes

mine = gitlab.Gitlab(url, private_token=user_token)
assert [p.id for p in mine.projects.list()] == [int(project_id)]
assert mine.projects.get(int(project_id)).id == int(project_id)

m.delete()
assert project.members.list() == []
try:
    mine.projects.get(int(project_id))
    raise SystemExit("a removed member still reads the project")
except gitlab.exceptions.GitlabGetError as e:
    assert e.response_code == 404, e.response_code
print("ok")
