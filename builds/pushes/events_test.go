package pushes

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/jobapi/jobapi/builds"
)

func readPayload(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func parse(t *testing.T, forge, typ, file string) event {
	t.Helper()
	body := readPayload(t, file)
	var ev event
	var err error
	if forge == GitLab {
		ev, err = parseGitLab(typ, body)
	} else {
		ev, err = parseGitHub(forge, typ, body)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", forge, file, err)
	}
	return ev
}

// The forges' own examples read as the pushes and merge requests they describe; deletions,
// closed requests and other events build nothing.
func TestParseForgeExamples(t *testing.T) {
	t.Parallel()
	const zero = builds.ZeroSHA
	cases := []struct {
		forge, typ, file string
		want             event
	}{
		{GitHub, "push", "github/push-branch-created.json",
			event{kind: push, ref: "refs/heads/master", before: zero, after: "6113728f27ae82c7b1a177c8d03f9e96e0adf246"}},
		{GitHub, "push", "github/push-tag-created.json",
			event{kind: push, ref: "refs/tags/simple-tag", before: zero, after: "6113728f27ae82c7b1a177c8d03f9e96e0adf246"}},
		{GitHub, "push", "github/push-tag-deleted.json", event{kind: ignored}},
		{GitHub, "pull_request", "github/pull_request-closed.json", event{kind: ignored}},
		{GitHub, "ping", "github/ping.json", event{kind: ignored}},
		{GitHub, "issues", "github/ping.json", event{kind: ignored}},
		{Gitea, "push", "gitea/push.json",
			event{kind: push, ref: "refs/heads/develop", before: "28e1879d029cb852e4844d9c718537df08844e03", after: "bffeb74224043ba2feb48d137756c8a9331c449a"}},
		{GitLab, "Push Hook", "gitlab/push.json",
			event{kind: push, ref: "refs/heads/master", before: "95790bf891e76fee5e1747ab589903a6a1f80f22", after: "da1560886d4f094c3e6c9ef40349f7d38b5d27d7"}},
		{GitLab, "Tag Push Hook", "gitlab/tag_push.json",
			event{kind: push, ref: "refs/tags/v1.0.0", before: zero, after: "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7"}},
		{GitLab, "Pipeline Hook", "gitlab/push.json", event{kind: ignored}},
	}
	for _, c := range cases {
		t.Run(c.file+" as "+c.typ, func(t *testing.T) {
			got := parse(t, c.forge, c.typ, c.file)
			if c.want.kind == ignored {
				if got.kind != ignored || got.reason == "" {
					t.Fatalf("%+v: want ignored with a reason", got)
				}
				return
			}
			if got.kind != c.want.kind || got.ref != c.want.ref || got.before != c.want.before || got.after != c.want.after {
				t.Errorf("got %+v, want %+v", got, c.want)
			}
		})
	}
}

// An annotated tag's push names the tag object in after and its commit beside it (GitHub's
// head_commit, GitLab's checkout_sha): the pipeline builds the commit.
func TestAnnotatedTagBuildsItsCommit(t *testing.T) {
	t.Parallel()
	const tagObject, commit = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	gh := strings.Replace(string(readPayload(t, "github/push-tag-created.json")), `"after": "6113728f27ae82c7b1a177c8d03f9e96e0adf246"`,
		`"after": "`+tagObject+`"`, 1)
	gh = strings.ReplaceAll(gh, "6113728f27ae82c7b1a177c8d03f9e96e0adf246", commit)
	gl := strings.Replace(string(readPayload(t, "gitlab/tag_push.json")), `"after": "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7"`,
		`"after": "`+tagObject+`"`, 1)
	gl = strings.ReplaceAll(gl, "82b3d5ae55f7080f1e6022629cdb57bfae7cccc7", commit)
	for name, parsed := range map[string]func() (event, error){
		"github": func() (event, error) { return parseGitHub(GitHub, "push", []byte(gh)) },
		"gitlab": func() (event, error) { return parseGitLab("Tag Push Hook", []byte(gl)) },
	} {
		ev, err := parsed()
		if err != nil || ev.kind != push || ev.after != commit {
			t.Errorf("%s: %+v, %v; want a push of the commit %s", name, ev, err, commit)
		}
	}
}

// A merge request's facts become GitLab's CI_MERGE_REQUEST_* variables; empty ones are left
// out, as GitLab leaves them out.
func TestMergeRequestVariables(t *testing.T) {
	t.Parallel()
	cases := []struct {
		forge, typ, file string
		ref, sha         string
		want             map[string]string
	}{
		{GitHub, "pull_request", "github/pull_request-opened.json", "refs/heads/changes", "ec26c3e57ca3a959ca5aad62de7213c562f8c821", map[string]string{
			"CI_MERGE_REQUEST_ID": "279147437", "CI_MERGE_REQUEST_IID": "2",
			"CI_MERGE_REQUEST_TITLE":                    "Update the README with new information.",
			"CI_MERGE_REQUEST_DESCRIPTION":              "This is a pretty simple change that we need to pull into master.",
			"CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED": "false",
			"CI_MERGE_REQUEST_SOURCE_BRANCH_NAME":       "changes", "CI_MERGE_REQUEST_SOURCE_BRANCH_SHA": "ec26c3e57ca3a959ca5aad62de7213c562f8c821",
			"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "master", "CI_MERGE_REQUEST_TARGET_BRANCH_SHA": "f95f852bd8fca8fcc58a9a2d6c842781e32a215e",
			"CI_MERGE_REQUEST_DRAFT": "false", "CI_MERGE_REQUEST_EVENT_TYPE": "detached", "CI_MERGE_REQUEST_REF_PATH": "refs/pull/2/head",
			"CI_MERGE_REQUEST_PROJECT_ID": "7", "CI_MERGE_REQUEST_PROJECT_PATH": "Codertocat/Hello-World",
			"CI_MERGE_REQUEST_PROJECT_URL": "https://github.com/Codertocat/Hello-World", "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "7",
			"CI_MERGE_REQUEST_SOURCE_PROJECT_PATH": "Codertocat/Hello-World", "CI_MERGE_REQUEST_SOURCE_PROJECT_URL": "https://github.com/Codertocat/Hello-World",
		}},
		{Gitea, "pull_request", "gitea/pull_request-synchronized.json", "refs/heads/feature", "bffeb74224043ba2feb48d137756c8a9331c449a", map[string]string{
			"CI_MERGE_REQUEST_ID": "2", "CI_MERGE_REQUEST_IID": "2", "CI_MERGE_REQUEST_TITLE": "Add a feature",
			"CI_MERGE_REQUEST_DESCRIPTION": "What it does, and why.", "CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED": "false",
			"CI_MERGE_REQUEST_SOURCE_BRANCH_NAME": "feature", "CI_MERGE_REQUEST_SOURCE_BRANCH_SHA": "bffeb74224043ba2feb48d137756c8a9331c449a",
			"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main", "CI_MERGE_REQUEST_TARGET_BRANCH_SHA": "28e1879d029cb852e4844d9c718537df08844e03",
			"CI_MERGE_REQUEST_LABELS": "Kind/Feature", "CI_MERGE_REQUEST_ASSIGNEES": "gitea",
			"CI_MERGE_REQUEST_DRAFT": "false", "CI_MERGE_REQUEST_EVENT_TYPE": "detached", "CI_MERGE_REQUEST_REF_PATH": "refs/pull/2/head",
			"CI_MERGE_REQUEST_PROJECT_ID": "7", "CI_MERGE_REQUEST_PROJECT_PATH": "gitea/webhooks",
			"CI_MERGE_REQUEST_PROJECT_URL": "http://localhost:3000/gitea/webhooks", "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "7",
			"CI_MERGE_REQUEST_SOURCE_PROJECT_PATH": "gitea/webhooks", "CI_MERGE_REQUEST_SOURCE_PROJECT_URL": "http://localhost:3000/gitea/webhooks",
		}},
		{GitLab, "Merge Request Hook", "gitlab/merge_request.json", "refs/heads/ms-viewport", "da1560886d4f094c3e6c9ef40349f7d38b5d27d7", map[string]string{
			"CI_MERGE_REQUEST_ID": "99", "CI_MERGE_REQUEST_IID": "1", "CI_MERGE_REQUEST_TITLE": "MS-Viewport",
			"CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED": "false",
			"CI_MERGE_REQUEST_SOURCE_BRANCH_NAME":       "ms-viewport", "CI_MERGE_REQUEST_SOURCE_BRANCH_SHA": "da1560886d4f094c3e6c9ef40349f7d38b5d27d7",
			"CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "master", "CI_MERGE_REQUEST_LABELS": "API", "CI_MERGE_REQUEST_ASSIGNEES": "user1",
			"CI_MERGE_REQUEST_DRAFT": "false", "CI_MERGE_REQUEST_EVENT_TYPE": "detached", "CI_MERGE_REQUEST_REF_PATH": "refs/merge-requests/1/head",
			"CI_MERGE_REQUEST_PROJECT_ID": "7", "CI_MERGE_REQUEST_PROJECT_PATH": "gitlabhq/gitlab-test",
			"CI_MERGE_REQUEST_PROJECT_URL": "http://example.com/gitlabhq/gitlab-test", "CI_MERGE_REQUEST_SOURCE_PROJECT_ID": "7",
			"CI_MERGE_REQUEST_SOURCE_PROJECT_PATH": "awesome_space/awesome_project", "CI_MERGE_REQUEST_SOURCE_PROJECT_URL": "http://example.com/awesome_space/awesome_project",
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			ev := parse(t, c.forge, c.typ, c.file)
			if ev.kind != mergeRequest || ev.ref != c.ref || ev.after != c.sha || ev.before != builds.ZeroSHA {
				t.Fatalf("got %+v, want a merge request of %s at %s", ev, c.ref, c.sha)
			}
			got := map[string]string{}
			for _, v := range ev.mr.variables(7) {
				got[v.Key] = v.Value
			}
			if d := cmp.Diff(c.want, got); d != "" {
				t.Errorf("variables (-want +got):\n%s", d)
			}
		})
	}
}

// A pull request from a fork builds nothing: its branch is not the project's, and its name
// may be a protected branch's here (whose variables it would get).
func TestForkPullRequestIgnored(t *testing.T) {
	t.Parallel()
	body := strings.Replace(string(readPayload(t, "github/pull_request-synchronize.json")),
		`"full_name": "Codertocat/Hello-World"`, `"full_name": "Mallory/Hello-World"`, 1)
	body = strings.Replace(body, `"id": 186853002`, `"id": 999`, 1) // the head repository's, listed first
	ev, err := parseGitHub(GitHub, "pull_request", []byte(body))
	if err != nil || ev.kind != ignored || !strings.Contains(ev.reason, "another repository") {
		t.Fatalf("fork pull request: %+v, %v; want ignored as from another repository", ev, err)
	}
	gitea := strings.Replace(string(readPayload(t, "gitea/pull_request-synchronized.json")), `"repo_id": 140}`, `"repo_id": 141}`, 1)
	ev, err = parseGitHub(Gitea, "pull_request", []byte(gitea))
	if err != nil || ev.kind != ignored {
		t.Fatalf("gitea fork pull request: %+v, %v; want ignored", ev, err)
	}
}

// A description longer than GitLab's 2700 characters is cut there, and says so.
func TestMergeRequestDescriptionTruncated(t *testing.T) {
	t.Parallel()
	mr := &mergeRequestFacts{Description: strings.Repeat("é", maxDescription+5)}
	vars := map[string]string{}
	for _, v := range mr.variables(1) {
		vars[v.Key] = v.Value
	}
	if n := len([]rune(vars["CI_MERGE_REQUEST_DESCRIPTION"])); n != maxDescription || vars["CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED"] != "true" {
		t.Errorf("description of %d characters, truncated=%s; want %d, true", n, vars["CI_MERGE_REQUEST_DESCRIPTION_IS_TRUNCATED"], maxDescription)
	}
}

// A payload that its forge's client cannot read, or a ref git would refuse, is a 400's
// validation error.
func TestMalformedPayloads(t *testing.T) {
	t.Parallel()
	cases := []struct{ forge, typ, body string }{
		{GitHub, "push", `{"ref": 5}`},
		{GitHub, "push", `{"ref": "refs/heads/--upload-pack=x", "before": "` + builds.ZeroSHA + `", "after": "6113728f27ae82c7b1a177c8d03f9e96e0adf246"}`},
		{GitHub, "push", `{"ref": "refs/heads/main", "after": "HEAD"}`},
		{Gitea, "pull_request", `{"action": "opened", "pull_request": "x"}`},
		{GitLab, "Push Hook", `[1, 2]`},
		{GitLab, "Merge Request Hook", `{"object_attributes": {"action": "open", "source_branch": "a b", "target_branch": "main", "last_commit": {"id": "6113728f27ae82c7b1a177c8d03f9e96e0adf246"}}}`},
	}
	for _, c := range cases {
		var err error
		if c.forge == GitLab {
			_, err = parseGitLab(c.typ, []byte(c.body))
		} else {
			_, err = parseGitHub(c.forge, c.typ, []byte(c.body))
		}
		var ve *builds.ValidationError
		if !errors.As(err, &ve) {
			t.Errorf("%s %s %s: %v; want a validation error", c.forge, c.typ, c.body, err)
		}
	}
}

func hmacHex(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// Each forge's signature is checked its way; a missing, wrong or foreign one, or a project
// without a secret, is a SignatureError.
func TestVerify(t *testing.T) {
	t.Parallel()
	const secret, body = "0123456789abcdef-secret", `{"ref":"refs/heads/main"}`
	settings := Settings{ProjectID: 3, WebhookSecret: secret}
	cases := []struct {
		name, forge string
		headers     map[string]string
		settings    Settings
		ok          bool
	}{
		{"github right", GitHub, map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex(secret, body)}, settings, true},
		{"github wrong secret", GitHub, map[string]string{"X-Hub-Signature-256": "sha256=" + hmacHex("another secret", body)}, settings, false},
		{"github sha1 only", GitHub, map[string]string{"X-Hub-Signature": "sha1=00"}, settings, false},
		{"github without prefix", GitHub, map[string]string{"X-Hub-Signature-256": hmacHex(secret, body)}, settings, false},
		{"github missing", GitHub, nil, settings, false},
		{"gitea right", Gitea, map[string]string{"X-Gitea-Signature": hmacHex(secret, body)}, settings, true},
		{"forgejo right", Gitea, map[string]string{"X-Forgejo-Signature": hmacHex(secret, body)}, settings, true},
		{"gitea other body", Gitea, map[string]string{"X-Gitea-Signature": hmacHex(secret, body+" ")}, settings, false},
		{"gitea not hex", Gitea, map[string]string{"X-Gitea-Signature": "zz"}, settings, false},
		{"gitlab right", GitLab, map[string]string{"X-Gitlab-Token": secret}, settings, true},
		{"gitlab prefix of it", GitLab, map[string]string{"X-Gitlab-Token": secret[:10]}, settings, false},
		{"gitlab missing", GitLab, nil, settings, false},
		{"no secret set", GitLab, map[string]string{"X-Gitlab-Token": ""}, Settings{ProjectID: 3}, false},
	}
	for _, c := range cases {
		w := Webhook{ProjectID: 3, Forge: c.forge, Body: []byte(body), Header: func(name string) string { return c.headers[name] }}
		err := verify(w, forgeHeaders[c.forge], c.settings)
		var se *SignatureError
		if c.ok != (err == nil) || (err != nil && !errors.As(err, &se)) {
			t.Errorf("%s: %v; want ok=%v (else a SignatureError)", c.name, err, c.ok)
		}
	}
}
