// Runner protocol: the job that answers POST /jobs/request, which takes the runner's token;
// the payload carries the job's own token for the calls that follow.

package handlers

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// defaultGitDepth is GitLab's default shallow-clone depth (ci_default_git_depth).
const defaultGitDepth = 20

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

// withJobToken puts gitlab-ci-token:<job token> into an http(s) remote without credentials
// on jobapi's own host (base's host and port), as GitLab does only for its own
// repositories: a third-party host (and plain http to it) never sees the token. A remote
// with credentials keeps them.
func withJobToken(remote, token, base string) string {
	u, err := url.Parse(remote)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.User != nil || !sameHost(u, base) {
		return remote
	}
	u.User = url.UserPassword("gitlab-ci-token", token)
	return u.String()
}

// sameHost says whether u is on base's host and port (a scheme's default port spelled or not).
func sameHost(u *url.URL, base string) bool {
	b, err := url.Parse(base)
	if err != nil || b.Hostname() == "" {
		return false
	}
	port := func(u *url.URL) string {
		if p := u.Port(); p != "" {
			return p
		}
		if u.Scheme == "https" {
			return "443"
		}
		return "80"
	}
	return strings.EqualFold(u.Hostname(), b.Hostname()) && port(u) == port(b)
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

// jobProjectInfo is what the payload says about the build's project.
type jobProjectInfo struct {
	name, path, fullPath, url, defaultBranch, repo string
}

func projectInfo(a builds.Assignment, base string) jobProjectInfo {
	p := jobProjectInfo{name: fmt.Sprintf("project-%d", a.Build.ProjectID), defaultBranch: "main"}
	p.path = p.name
	if pr := a.Project.Project; pr != nil {
		p.name, p.path, p.defaultBranch, p.repo = pr.Name, pr.Path, pr.DefaultBranch, pr.RepoURL
	}
	p.fullPath = projectNamespace + "/" + p.path
	p.url = base + "/" + p.fullPath
	return p
}

// serverURL is CI_SERVER_URL taken apart as GitLab's CI_SERVER_* variables show it.
type serverURL struct {
	url, protocol, host, port, fqdn string
}

func parseServerURL(base string) serverURL {
	s := serverURL{url: base, protocol: "http", host: base, port: "80"}
	u, err := url.Parse(base)
	if err != nil {
		return s
	}
	s.protocol, s.host = u.Scheme, u.Hostname()
	defaultPort := map[string]string{"http": "80", "https": "443"}[u.Scheme]
	s.port, s.fqdn = u.Port(), s.host
	if s.port == "" {
		s.port = defaultPort
	} else if s.port != defaultPort {
		s.fqdn = u.Host // host:port, an IPv6 address in brackets
	}
	return s
}

// jobPayload builds the job JSON gitlab-runner decodes into its JobResponse, as GitLab's
// JobRequest::Response shapes it.
func (h *Handler) jobPayload(r *http.Request, a builds.Assignment, signer IDTokenSigner) (api.Job, error) {
	b := a.Build
	base := h.externalBase(r)
	project := projectInfo(a, base)
	refName, refType := splitRef(b.Ref)
	// Decided when the pipeline was created, from the project's protected branches and tags.
	protected := b.Protected
	vars := jobVariables(a, base, project, refName, refType, protected)
	if len(b.Payload.IDTokens) > 0 {
		tokens, err := idTokenVariables(signer, a, vars, base, project, refName, refType, protected, time.Now())
		if err != nil {
			return api.Job{}, fmt.Errorf("job %d: id_tokens: %w", b.ID, err)
		}
		for _, t := range tokens {
			vars.set(t)
		}
	}

	depth := defaultGitDepth
	if d, ok := vars.get("GIT_DEPTH"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(d)); err == nil && n >= 0 {
			depth = n
		}
	}
	git := api.GitInfo{RepoObjectFormat: "sha1", Ref: refName, Sha: b.SHA, BeforeSha: a.Pipeline.BeforeSHA, RefType: refType,
		Depth: depth, Protected: protected}
	if refType == "tag" {
		git.Refspecs = []string{"+refs/tags/" + refName + ":refs/tags/" + refName}
	} else {
		git.Refspecs = []string{"+refs/heads/" + refName + ":refs/remotes/origin/" + refName}
	}
	if project.repo != "" {
		git.RepoURL = withJobToken(project.repo, a.JobToken, base)
	} else {
		// A syntactically valid URL keeps the runner's build directory stable even though
		// GIT_STRATEGY=none means nothing is cloned.
		git.RepoURL = withJobToken(project.url+".git", a.JobToken, base)
	}

	var inQueue float64
	if b.QueuedAt != nil && b.AssignedAt != nil {
		inQueue = b.AssignedAt.Sub(*b.QueuedAt).Seconds()
	}
	return api.Job{
		ID: b.ID, Token: a.JobToken, AllowGitFetch: project.repo != "",
		JobInfo: api.JobInfo{ID: b.ID, Name: b.Name, Stage: b.Stage, PipelineID: b.PipelineID, ProjectID: b.ProjectID,
			ProjectName: project.name, ProjectFullPath: project.fullPath, TimeInQueueSeconds: inQueue},
		GitInfo:      git,
		RunnerInfo:   api.JobRunnerInfo{Timeout: b.TimeoutSeconds},
		Variables:    vars.list,
		Steps:        jobSteps(b),
		Image:        image(b.Payload.Image),
		Services:     mapSlice(b.Payload.Services, image),
		Artifacts:    mapSlice(b.Payload.Artifacts, artifact),
		Cache:        caches(b.Payload.Cache, protected),
		Credentials:  []api.Credentials{},
		Dependencies: dependencies(a),
		Hooks:        []api.Hook{},
		Secrets:      map[string]any{},
		Features: api.JobFeatures{TraceSections: true, TokenMaskPrefixes: []string{"glcbt-", "glrt-"},
			FailureReasons: builds.FailureReasons},
	}, nil
}

// jobVariables layers the job's variables in GitLab's precedence ("CI/CD variable
// precedence", lowest first): predefined < the job's YAML variables (global ones merged
// under the job's own) < project variables < pipeline variables.
func jobVariables(a builds.Assignment, base string, project jobProjectInfo, refName, refType string, protected bool) *varList {
	b := a.Build
	server := parseServerURL(base)
	var startedAt string
	if b.AssignedAt != nil {
		startedAt = b.AssignedAt.UTC().Format(time.RFC3339)
	}
	tags, _ := json.Marshal(nonNil(a.Runner.Tags))
	shortSHA := b.SHA
	if len(shortSHA) > 8 {
		shortSHA = shortSHA[:8]
	}

	vars := &varList{}
	vars.public("CI", "true")
	vars.public("GITLAB_CI", "true")
	vars.public("CI_SERVER", "yes")
	vars.public("CI_SERVER_URL", server.url)
	vars.public("CI_SERVER_HOST", server.host)
	vars.public("CI_SERVER_PORT", server.port)
	vars.public("CI_SERVER_PROTOCOL", server.protocol)
	vars.public("CI_SERVER_FQDN", server.fqdn)
	vars.public("CI_API_V4_URL", base+"/api/v4")
	vars.public("CI_PROJECT_ID", strconv.FormatInt(b.ProjectID, 10))
	vars.public("CI_PROJECT_NAME", project.name)
	vars.public("CI_PROJECT_PATH", project.fullPath)
	vars.public("CI_PROJECT_PATH_SLUG", builds.RefSlug(project.fullPath))
	vars.public("CI_PROJECT_NAMESPACE", projectNamespace)
	vars.public("CI_PROJECT_ROOT_NAMESPACE", projectNamespace)
	vars.public("CI_PROJECT_URL", project.url)
	// CI_PROJECT_DIR is the runner's: it alone knows the build directory, and a value sent
	// here would replace its own (the job's variables come after the runner's defaults).
	vars.public("CI_DEFAULT_BRANCH", project.defaultBranch)
	vars.public("CI_PIPELINE_ID", strconv.FormatInt(b.PipelineID, 10))
	vars.public("CI_PIPELINE_IID", strconv.FormatInt(a.Pipeline.IID, 10))
	vars.public("CI_PIPELINE_SOURCE", a.Pipeline.Source)
	vars.public("CI_PIPELINE_URL", fmt.Sprintf("%s/-/pipelines/%d", project.url, b.PipelineID))
	vars.public("CI_PIPELINE_CREATED_AT", a.Pipeline.CreatedAt.UTC().Format(time.RFC3339))
	vars.public("CI_JOB_ID", strconv.FormatInt(b.ID, 10))
	vars.public("CI_JOB_NAME", b.Name)
	vars.public("CI_JOB_NAME_SLUG", builds.RefSlug(b.Name))
	vars.public("CI_JOB_STAGE", b.Stage)
	vars.public("CI_JOB_URL", fmt.Sprintf("%s/-/jobs/%d", project.url, b.ID))
	vars.set(api.JobVariable{Key: "CI_JOB_TOKEN", Value: a.JobToken, Masked: true})
	vars.public("CI_JOB_STARTED_AT", startedAt)
	vars.public("CI_JOB_TIMEOUT", strconv.Itoa(b.TimeoutSeconds))
	vars.public("CI_JOB_ATTEMPT", strconv.Itoa(b.Attempt))
	if b.Payload.NodeTotal > 0 {
		vars.public("CI_NODE_INDEX", strconv.Itoa(b.Payload.NodeIndex))
		vars.public("CI_NODE_TOTAL", strconv.Itoa(b.Payload.NodeTotal))
	}
	vars.public("CI_COMMIT_SHA", b.SHA)
	vars.public("CI_COMMIT_SHORT_SHA", shortSHA)
	vars.public("CI_COMMIT_BEFORE_SHA", a.Pipeline.BeforeSHA)
	vars.public("CI_COMMIT_REF_NAME", refName)
	vars.public("CI_COMMIT_REF_SLUG", builds.RefSlug(refName))
	vars.public("CI_COMMIT_REF_PROTECTED", strconv.FormatBool(protected))
	switch {
	case refType == "tag":
		vars.public("CI_COMMIT_TAG", refName)
	case a.Pipeline.Source != builds.SourceMergeRequestEvent: // as GitLab: no branch in a merge request pipeline
		vars.public("CI_COMMIT_BRANCH", refName)
	}
	if env := b.Payload.Environment; env != nil {
		// Expanded when the pipeline was created (ciconfig), as GitLab does.
		vars.public("CI_ENVIRONMENT_NAME", env.Name)
		vars.public("CI_ENVIRONMENT_SLUG", env.Slug)
		if env.URL != "" {
			vars.public("CI_ENVIRONMENT_URL", env.URL)
		}
		vars.public("CI_ENVIRONMENT_ACTION", env.Action)
		vars.public("CI_ENVIRONMENT_TIER", env.Tier)
	}
	vars.public("CI_RUNNER_ID", strconv.FormatInt(b.RunnerID, 10))
	vars.public("CI_RUNNER_DESCRIPTION", a.Runner.Description)
	vars.public("CI_RUNNER_TAGS", string(tags))
	if project.repo == "" {
		// Nothing to clone: a project without a repository (or an implicit one) runs its
		// scripts in an empty directory. A job, project or pipeline variable may still say
		// otherwise.
		vars.public("GIT_STRATEGY", "none")
	}
	for _, v := range b.Payload.Variables {
		vars.set(api.JobVariable{Key: v.Key, Value: v.Value, Public: !v.Masked, Masked: v.Masked, File: v.File, Raw: v.Raw})
	}
	for _, v := range a.Project.JobVariables(b.Protected) {
		vars.set(api.JobVariable{Key: v.Key, Value: v.Value, Masked: v.Masked, // project variables are never public, as in GitLab
			File: v.VariableType == builds.VariableFile})
	}
	for _, v := range a.Pipeline.Variables {
		vars.set(api.JobVariable{Key: v.Key, Value: v.Value, File: v.File}) // neither public nor masked, as in GitLab
	}
	return vars
}

// jobSteps are GitLab's steps (Gitlab::Ci::Build::Step): before_script and script as one
// script step, after_script a step of its own that runs always and may fail.
func jobSteps(b builds.Build) []api.Step {
	script := slices.Concat(b.Payload.BeforeScript, b.Payload.Script)
	steps := []api.Step{{Name: "script", Script: nonNil(script), Timeout: b.TimeoutSeconds, When: builds.WhenOnSuccess}}
	if len(b.Payload.AfterScript) > 0 {
		steps = append(steps, api.Step{Name: "after_script", Script: b.Payload.AfterScript,
			Timeout: b.TimeoutSeconds, When: builds.WhenAlways, AllowFailure: true})
	}
	return steps
}

// image is an image or service as the runner's Image: its variables are public, as GitLab
// sends a service's.
func image(im builds.Image) api.Image {
	out := api.Image{Name: im.Name, Alias: im.Alias, Command: im.Command, Entrypoint: im.Entrypoint,
		PullPolicy: im.PullPolicy}
	for _, v := range im.Variables {
		out.Variables = append(out.Variables, api.JobVariable{Key: v.Key, Value: v.Value, Public: true})
	}
	return out
}

// artifact fills in GitLab's defaults: the archive is a zip uploaded on success.
func artifact(a builds.Artifacts) api.Artifact {
	out := api.Artifact{Name: a.Name, Untracked: a.Untracked, Paths: nonNil(a.Paths), Exclude: nonNil(a.Exclude),
		When: a.When, ArtifactType: a.ArtifactType, ArtifactFormat: a.ArtifactFormat, ExpireIn: a.ExpireIn}
	if out.When == "" {
		out.When = builds.WhenOnSuccess
	}
	if out.ArtifactType == "" {
		out.ArtifactType = "archive"
	}
	if out.ArtifactFormat == "" && out.ArtifactType == "archive" {
		out.ArtifactFormat = "zip"
	}
	return out
}

// caches fills in GitLab's defaults (key "default", policy pull-push, when on_success) and,
// as GitLab does with separate caches for protected refs (its default), suffixes every key
// and fallback key with -protected or -non_protected: a job on an unprotected ref can then
// never write a cache that a protected one restores.
func caches(list []builds.Cache, protected bool) []api.Cache {
	out := make([]api.Cache, 0, len(list))
	for _, c := range list {
		suffix := "-non_protected"
		if protected && !c.Unprotect {
			suffix = "-protected"
		}
		e := api.Cache{Key: c.Key, Untracked: c.Untracked, Policy: c.Policy, Paths: nonNil(c.Paths), When: c.When,
			FallbackKeys: make([]string, 0, len(c.FallbackKeys))}
		if e.Key == "" {
			e.Key = "default"
		}
		e.Key += suffix
		for _, k := range c.FallbackKeys {
			e.FallbackKeys = append(e.FallbackKeys, k+suffix)
		}
		if e.Policy == "" {
			e.Policy = "pull-push"
		}
		if e.When == "" {
			e.When = builds.WhenOnSuccess
		}
		out = append(out, e)
	}
	return out
}

// dependencies are the jobs whose artifacts the runner downloads. Each carries the claiming
// job's own token, as GitLab sends it: the download is authorised by the downloading job.
func dependencies(a builds.Assignment) []api.Dependency {
	out := make([]api.Dependency, 0, len(a.Dependencies))
	for _, d := range a.Dependencies {
		e := api.Dependency{ID: d.ID, Name: d.Name, Token: a.JobToken}
		if d.ArtifactsFile != nil {
			e.ArtifactsFile = &api.DependencyArtifactsFile{Filename: d.ArtifactsFile.Filename, Size: d.ArtifactsFile.Size}
		}
		out = append(out, e)
	}
	return out
}

func mapSlice[T, U any](in []T, f func(T) U) []U {
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
