"""python-gitlab's users and personal access token calls against a jobapi (TestPythonGitlabUsers).

Arguments: the base URL of one replica, the base URL of another on the same data, the admin token.
"""
import datetime
import sys

import gitlab

url, other_url, admin_token = sys.argv[1], sys.argv[2], sys.argv[3]
gl = gitlab.Gitlab(url, private_token=admin_token)
gl.auth()
assert gl.user.username == "admin" and gl.user.is_admin, gl.user.attributes

user = gl.users.create({"username": "carol", "name": "Carol", "email": "carol@example.com", "skip_confirmation": True})
assert user.id >= 2 and user.state == "active" and user.email == "carol@example.com", user.attributes
assert [u.username for u in gl.users.list()] == ["carol"]
assert [u.id for u in gl.users.list(username="carol")] == [user.id]
got = gl.users.get(user.id)
assert got.name == "Carol", got.attributes
gl.users.update(user.id, {"name": "Carol C", "username": "carol", "email": "carol@example.com"})
assert gl.users.get(user.id).name == "Carol C"
try:
    gl.users.create({"username": "Carol", "name": "Dup", "email": "dup@example.com"})
    raise AssertionError("a duplicate username was created")
except gitlab.exceptions.GitlabCreateError as e:
    assert e.response_code == 409, e.response_code

tok = user.personal_access_tokens.create({"name": "py", "scopes": ["api"]})
assert tok.token.startswith("glpat-") and tok.scopes == ["api"] and tok.active, tok.attributes
# Without expires_at a token gets the longest lifetime allowed (GitLab's 365 days); a date
# within it is kept, one past it refused.
default_expiry = (datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=365)).isoformat()
assert tok.expires_at == default_expiry, (tok.expires_at, default_expiry)
in_a_month = (datetime.datetime.now(datetime.timezone.utc).date() + datetime.timedelta(days=30)).isoformat()
ro = user.personal_access_tokens.create({"name": "py-ro", "scopes": ["read_api"], "expires_at": in_a_month})
assert ro.expires_at == in_a_month, ro.attributes
try:
    user.personal_access_tokens.create({"name": "py-long", "scopes": ["api"], "expires_at": "2999-01-01"})
    raise AssertionError("a token past the maximum lifetime was created")
except gitlab.exceptions.GitlabCreateError as e:
    assert e.response_code == 400 and "JOBAPI_MAX_TOKEN_LIFETIME_DAYS" in e.error_message, (e.response_code, e.error_message)

# The token as PRIVATE-TOKEN and as a Bearer (python-gitlab's oauth_token), on both replicas.
me = gitlab.Gitlab(url, private_token=tok.token)
me.auth()
assert me.user.username == "carol" and me.user.id == user.id, me.user.attributes
for base in (url, other_url):
    as_bearer = gitlab.Gitlab(base, oauth_token=tok.token)
    as_bearer.auth()
    assert as_bearer.user.id == user.id

reader = gitlab.Gitlab(url, private_token=ro.token)
reader.auth()
assert {t.name for t in reader.personal_access_tokens.list()} == {"py", "py-ro"}
try:
    reader.http_post("/user/personal_access_tokens", post_data={"name": "x", "scopes": ["api"]})
    raise AssertionError("read_api created a token")
except gitlab.exceptions.GitlabHttpError as e:
    assert e.response_code == 403 and "insufficient_scope" in str(e), (e.response_code, str(e))

assert sorted(t.name for t in gl.personal_access_tokens.list(user_id=user.id)) == ["py", "py-ro"]
gl.personal_access_tokens.delete(ro.id)
for base in (url, other_url):
    try:
        gitlab.Gitlab(base, private_token=ro.token).auth()
        raise AssertionError("a revoked token authenticated on " + base)
    except gitlab.exceptions.GitlabAuthenticationError as e:
        assert e.response_code == 401, e.response_code

user.block()
try:
    me.auth()
    raise AssertionError("a blocked user's token authenticated")
except gitlab.exceptions.GitlabError as e:
    assert e.response_code == 403, e.response_code
user.unblock()
me.auth()

user.delete()
try:
    gitlab.Gitlab(other_url, private_token=tok.token).auth()
    raise AssertionError("a deleted user's token authenticated")
except gitlab.exceptions.GitlabAuthenticationError as e:
    assert e.response_code == 401, e.response_code
print("ok")
