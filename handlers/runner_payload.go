// Runner protocol: the job that answers POST /jobs/request, which takes the runner's token;
// the payload carries the job's own token for the calls that follow.

package handlers

import (
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
