package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// defaultGitDepth is GitLab's default shallow-clone depth (ci_default_git_depth).
const defaultGitDepth = 20

// zeroSHA is before_sha when there is no previous commit: pipelines created through the API
// have none, as in GitLab.
const zeroSHA = "0000000000000000000000000000000000000000"

// externalBase is the URL jobs reach jobapi at: JOBAPI_EXTERNAL_URL, else this request's
// scheme and Host.
func (h *Handler) externalBase(r *http.Request) string {
	if h.external != "" {
		return h.external
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// splitRef takes "main", "refs/heads/main" or "refs/tags/v1" apart into the name and its
// type: a pipeline's ref is a branch unless it is spelled as a tag ref.
func splitRef(ref string) (name, refType string) {
	if t, ok := strings.CutPrefix(ref, "refs/tags/"); ok {
		return t, "tag"
	}
	return strings.TrimPrefix(ref, "refs/heads/"), "branch"
}

// refSlug is CI_COMMIT_REF_SLUG: lowercased, every other character a dash, at most 63.
func refSlug(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	out := b.String()
	if len(out) > 63 {
		out = out[:63]
	}
	return strings.Trim(out, "-")
}

// withJobToken puts gitlab-ci-token:<job token> into an http(s) remote without credentials,
// as GitLab does for its own repositories; a remote with credentials keeps them.
func withJobToken(remote, token string) string {
	u, err := url.Parse(remote)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil {
		return remote
	}
	u.User = url.UserPassword("gitlab-ci-token", token)
	return u.String()
}

// varList keeps variables in GitLab's precedence: a later layer replaces an earlier value of
// the same key in place (gitlab-runner would take the last one anyway; one entry per key
// keeps the payload readable).
type varList struct {
	list []api.JobVariable
	at   map[string]int
}

func (l *varList) set(v api.JobVariable) {
	if l.at == nil {
		l.at = make(map[string]int)
	}
	if i, ok := l.at[v.Key]; ok {
		l.list[i] = v
		return
	}
	l.at[v.Key] = len(l.list)
	l.list = append(l.list, v)
}

func (l *varList) public(key, value string) {
	l.set(api.JobVariable{Key: key, Value: value, Public: true})
}

func (l *varList) get(key string) (string, bool) {
	i, ok := l.at[key]
	if !ok {
		return "", false
	}
	return l.list[i].Value, true
}

// jobPayload builds the job JSON gitlab-runner decodes into spec.Job (common/network.go
// JobResponse): predefined variables < project variables < job variables.
func (h *Handler) jobPayload(r *http.Request, a builds.Assignment) api.Job {
	b := a.Build
	project := a.Project.Project
	base := h.externalBase(r)
	refName, refType := splitRef(b.Ref)

	name, path, defaultBranch, repo := fmt.Sprintf("project-%d", b.ProjectID), "", "main", ""
	path = name
	if project != nil {
		name, path, defaultBranch, repo = project.Name, project.Path, project.DefaultBranch, project.RepoURL
	}
	fullPath := projectNamespace + "/" + path
	projectURL := base + "/" + fullPath
	serverHost := base
	if u, err := url.Parse(base); err == nil {
		serverHost = u.Hostname()
	}
	var startedAt string
	if b.AssignedAt != nil {
		startedAt = b.AssignedAt.UTC().Format(time.RFC3339)
	}
	tags, _ := json.Marshal(nonNil(a.Runner.Tags))
	shortSHA := b.SHA
	if len(shortSHA) > 8 {
		shortSHA = shortSHA[:8]
	}

	var vars varList
	vars.public("CI", "true")
	vars.public("GITLAB_CI", "true")
	vars.public("CI_SERVER", "yes")
	vars.public("CI_SERVER_URL", base)
	vars.public("CI_SERVER_HOST", serverHost)
	vars.public("CI_API_V4_URL", base+"/api/v4")
	vars.public("CI_PROJECT_ID", strconv.FormatInt(b.ProjectID, 10))
	vars.public("CI_PROJECT_NAME", name)
	vars.public("CI_PROJECT_PATH", fullPath)
	vars.public("CI_PROJECT_NAMESPACE", projectNamespace)
	vars.public("CI_PROJECT_URL", projectURL)
	vars.public("CI_DEFAULT_BRANCH", defaultBranch)
	vars.public("CI_PIPELINE_ID", strconv.FormatInt(b.PipelineID, 10))
	// jobapi keeps no per-project pipeline counter: the iid is the id.
	vars.public("CI_PIPELINE_IID", strconv.FormatInt(b.PipelineID, 10))
	vars.public("CI_PIPELINE_SOURCE", "api")
	vars.public("CI_PIPELINE_URL", fmt.Sprintf("%s/-/pipelines/%d", projectURL, b.PipelineID))
	vars.public("CI_JOB_ID", strconv.FormatInt(b.ID, 10))
	vars.public("CI_JOB_NAME", b.Name)
	vars.public("CI_JOB_STAGE", b.Stage)
	vars.public("CI_JOB_URL", fmt.Sprintf("%s/-/jobs/%d", projectURL, b.ID))
	vars.set(api.JobVariable{Key: "CI_JOB_TOKEN", Value: a.JobToken, Masked: true})
	vars.public("CI_JOB_STARTED_AT", startedAt)
	vars.public("CI_JOB_TIMEOUT", strconv.Itoa(b.TimeoutSeconds))
	vars.public("CI_JOB_ATTEMPT", strconv.Itoa(b.Attempt))
	vars.public("CI_COMMIT_SHA", b.SHA)
	vars.public("CI_COMMIT_SHORT_SHA", shortSHA)
	vars.public("CI_COMMIT_BEFORE_SHA", zeroSHA)
	vars.public("CI_COMMIT_REF_NAME", refName)
	vars.public("CI_COMMIT_REF_SLUG", refSlug(refName))
	if refType == "tag" {
		vars.public("CI_COMMIT_TAG", refName)
	} else {
		vars.public("CI_COMMIT_BRANCH", refName)
	}
	vars.public("CI_RUNNER_ID", strconv.FormatInt(b.RunnerID, 10))
	vars.public("CI_RUNNER_DESCRIPTION", a.Runner.Description)
	vars.public("CI_RUNNER_TAGS", string(tags))
	if repo == "" {
		// Nothing to clone: a project without a repository (or an implicit one) runs its
		// scripts in an empty directory. A project or job variable may still say otherwise.
		vars.public("GIT_STRATEGY", "none")
	}
	for _, v := range a.Project.JobVariables(b.Ref) {
		vars.set(api.JobVariable{Key: v.Key, Value: v.Value, Masked: v.Masked, // project variables are never public, as in GitLab
			File: v.VariableType == builds.VariableFile})
	}
	for _, v := range b.Payload.Variables {
		vars.set(api.JobVariable{Key: v.Key, Value: v.Value, Public: !v.Masked, Masked: v.Masked, File: v.File})
	}

	depth := defaultGitDepth
	if d, ok := vars.get("GIT_DEPTH"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(d)); err == nil && n >= 0 {
			depth = n
		}
	}
	git := api.GitInfo{RepoObjectFormat: "sha1", Ref: refName, Sha: b.SHA, BeforeSha: zeroSHA, RefType: refType,
		Depth: depth, Protected: refType == "branch" && refName == defaultBranch}
	if refType == "tag" {
		git.Refspecs = []string{"+refs/tags/" + refName + ":refs/tags/" + refName}
	} else {
		git.Refspecs = []string{"+refs/heads/" + refName + ":refs/remotes/origin/" + refName}
	}
	if repo != "" {
		git.RepoURL = withJobToken(repo, a.JobToken)
	} else {
		// A syntactically valid URL keeps the runner's build directory stable even though
		// GIT_STRATEGY=none means nothing is cloned.
		git.RepoURL = withJobToken(base+"/"+fullPath+".git", a.JobToken)
	}

	steps := []api.Step{{Name: "script", Script: b.Payload.Script, Timeout: b.TimeoutSeconds, When: "on_success"}}
	if len(b.Payload.AfterScript) > 0 {
		steps = append(steps, api.Step{Name: "after_script", Script: b.Payload.AfterScript,
			Timeout: b.TimeoutSeconds, When: "always", AllowFailure: true})
	}
	services := make([]api.Image, 0, len(b.Payload.Services))
	for _, s := range b.Payload.Services {
		services = append(services, api.Image{Name: s.Name, Command: []string{}, Entrypoint: []string{}, Ports: []any{}})
	}
	var inQueue float64
	if b.QueuedAt != nil && b.AssignedAt != nil {
		inQueue = b.AssignedAt.Sub(*b.QueuedAt).Seconds()
	}
	return api.Job{
		ID: b.ID, Token: a.JobToken, AllowGitFetch: repo != "",
		JobInfo: api.JobInfo{ID: b.ID, Name: b.Name, Stage: b.Stage, PipelineID: b.PipelineID, ProjectID: b.ProjectID,
			ProjectName: name, ProjectFullPath: fullPath, TimeInQueueSeconds: inQueue},
		GitInfo:    git,
		RunnerInfo: api.JobRunnerInfo{Timeout: b.TimeoutSeconds},
		Variables:  vars.list,
		Steps:      steps,
		Image:      api.Image{Name: b.Payload.Image.Name, Command: []string{}, Entrypoint: []string{}, Ports: []any{}},
		Services:   services,
		Artifacts:  []any{}, Cache: []any{}, Credentials: []any{}, Dependencies: []any{}, Hooks: []any{},
		Secrets: map[string]any{},
		Features: api.JobFeatures{TraceSections: true, TokenMaskPrefixes: []string{"glcbt-", "glrt-"},
			FailureReasons: builds.FailureReasons},
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
