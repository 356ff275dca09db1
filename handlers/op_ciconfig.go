// Operator API, .gitlab-ci.yml: POST /projects/:id/ci/lint and the YAML bodies of POST
// /projects/:id/pipeline take a member's personal access token, or an administrator's (or the
// admin token), in PRIVATE-TOKEN or Authorization: Bearer; each route's action (h.can in
// routes.go) decides by the caller's role (builds/access).

package handlers

import (
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/gitref"
)

// yamlMediaTypes are the Content-Types under which POST …/pipeline and …/ci/lint take the
// .gitlab-ci.yml text itself as the body.
var yamlMediaTypes = map[string]bool{
	"application/yaml": true, "application/x-yaml": true, "text/yaml": true, "text/x-yaml": true,
}

func isYAML(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return yamlMediaTypes[mt]
}

// readYAMLBody reads a YAML body whole (limitBody bounds it): the compiler needs all of it.
func readYAMLBody(r *http.Request) ([]byte, error) {
	src, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, bodyError(err)
	}
	if len(src) == 0 {
		return nil, badRequest("request body is empty; expected the .gitlab-ci.yml text")
	}
	return src, nil
}

// ciRequest is a pipeline from .gitlab-ci.yml: the JSON form {"ref", "sha", "ci_config",
// "variables"}, or the YAML text as the body with ref and sha in the query.
type ciRequest struct {
	Ref             string
	SHA             string
	Config          []byte
	TimeoutStrategy string
	Origin          pipelineOrigin
}

// yamlRequest reads a YAML body with its query: ?ref=…&sha=…&before_sha=…&source=…&
// timeout_strategy=…. Pipeline variables need the JSON form.
func yamlRequest(r *http.Request) (ciRequest, error) {
	src, err := readYAMLBody(r)
	if err != nil {
		return ciRequest{}, err
	}
	q := r.URL.Query()
	return ciRequest{Ref: q.Get("ref"), SHA: q.Get("sha"), Config: src, TimeoutStrategy: q.Get("timeout_strategy"),
		Origin: pipelineOrigin{BeforeSha: q.Get("before_sha"), Source: q.Get("source")}}, nil
}

// compile turns a ciRequest into a pipeline definition: what rules and workflow:rules see is
// the pipeline as the runner will (its ref, the project's default branch and variables, the
// pipeline's variables), so a rule on $CI_COMMIT_BRANCH or on a project variable means the
// same at creation as in the job.
func (h *Handler) compile(r *http.Request, pid int64, req ciRequest) (builds.PipelineDefinition, ciconfig.Result, error) {
	cctx, err := h.ciContext(r, pid, req)
	if err != nil {
		return builds.PipelineDefinition{}, ciconfig.Result{}, err
	}
	res, err := ciconfig.Compile(req.Config, cctx)
	if err != nil {
		return builds.PipelineDefinition{}, res, err
	}
	def := builds.PipelineDefinition{ProjectID: pid, Ref: req.Ref, SHA: req.SHA, Stages: res.Stages,
		TimeoutStrategy: req.TimeoutStrategy, Jobs: res.Jobs, AutoCancel: res.AutoCancel}
	req.Origin.apply(&def)
	return def, res, nil
}

// ciContext gathers what the compiler's rules may test. The request's ref, sha and
// before_sha are checked first: include: local and rules:changes/exists hand them to git.
func (h *Handler) ciContext(r *http.Request, pid int64, req ciRequest) (ciconfig.Context, error) {
	if err := gitref.CheckRevisions(req.Ref, req.SHA, req.Origin.BeforeSha); err != nil {
		return ciconfig.Context{}, err
	}
	jp, err := h.svc.ProjectForPipeline(r.Context(), pid)
	if err != nil {
		return ciconfig.Context{}, err
	}
	o := ciconfig.Origin{ProjectID: pid, Project: jp, Ref: req.Ref, SHA: req.SHA, BeforeSHA: req.Origin.BeforeSha,
		Source: req.Origin.Source, ServerURL: h.externalBase(r), Namespace: projectNamespace, Variables: req.Origin.Variables}
	c := o.Context()
	if h.includes != nil {
		// include: local reads the repository at the pipeline's commit (its ref without one).
		rev := req.SHA
		if rev == "" {
			rev = req.Ref
			if rev == "" {
				rev, _ = o.RefName()
			}
		}
		repoURL := ""
		if jp.Project != nil {
			repoURL = jp.Project.RepoURL
		}
		files := h.includes.For(r.Context(), repoURL, rev)
		c.Includes, c.Repository = files, files
	}
	return c, nil
}

// lintRequest is GitLab's POST /projects/:id/ci/lint body. dry_run, include_jobs and ref
// may come in the query instead (as GitLab's clients send them, and with a YAML body).
type lintRequest struct {
	Content string   `json:"content"`
	Ref     string   `json:"ref"`
	DryRun  *boolish `json:"dry_run"`
	// IncludeJobs is accepted for GitLab's clients; jobs are always listed (the answer's
	// contract since the first release).
	IncludeJobs *boolish `json:"include_jobs"`
}

// lint answers GitLab's {valid, errors, warnings, merged_yaml, includes, jobs} without
// creating anything. An invalid configuration is a 200 with valid: false, as in GitLab.
// Without dry_run it is GitLab's static check: rules, only and except are not evaluated
// for any ref, and every job is listed. With dry_run: true the pipeline's creation for
// ref (the project's default branch without one) is simulated.
func (h *Handler) lint(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	dryRun, err := queryBool(q.Get("dry_run"), "dry_run")
	if err != nil {
		return err
	}
	if _, err := queryBool(q.Get("include_jobs"), "include_jobs"); err != nil {
		return err
	}
	var req ciRequest
	if isYAML(r) {
		if req, err = yamlRequest(r); err != nil {
			return err
		}
	} else {
		if isForm(r) {
			return &httpError{code: http.StatusUnsupportedMediaType, msg: "send the configuration as JSON {\"content\": …} or as application/yaml"}
		}
		var body lintRequest
		if err := decodeJSON(r, &body, true); err != nil {
			return err
		}
		if body.Content == "" {
			return badRequest("content is missing: the .gitlab-ci.yml text to check")
		}
		ref := body.Ref
		if ref == "" {
			ref = q.Get("ref")
		}
		if body.DryRun != nil {
			dryRun = bool(*body.DryRun)
		}
		req = ciRequest{Ref: ref, Config: []byte(body.Content)}
	}
	if !dryRun {
		// GitLab's static check reads the file at the default branch whatever ref says
		// (ref only sets a dry run's context). A ref git would take for an option is still
		// a 400, as for a dry run.
		if err := gitref.CheckRevisions(req.Ref, req.SHA, req.Origin.BeforeSha); err != nil {
			return err
		}
		req.Ref, req.SHA, req.Origin = "", "", pipelineOrigin{}
	}
	cctx, err := h.ciContext(r, pid, req)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, ciconfig.Lint(req.Config, cctx, dryRun))
	return nil
}

// queryBool reads a boolean query parameter as GitLab's API does ("" is false).
func queryBool(v, name string) (bool, error) {
	if v == "" {
		return false, nil
	}
	b, err := parseBool(v)
	if err != nil {
		return false, badRequest("%s is invalid: want true or false, got %.40q", name, v)
	}
	return b, nil
}

// ciConfigError is the client message of a compile error.
func ciConfigError(err error) (string, bool) {
	var ce *ciconfig.Error
	if errors.As(err, &ce) {
		return ce.Error(), true
	}
	return "", false
}
