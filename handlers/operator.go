package handlers

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// isForm reports whether the body is form-encoded (GitLab accepts both forms and JSON).
func isForm(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return mt == "application/x-www-form-urlencoded" || mt == "multipart/form-data"
}

// runnerFields is the body of POST /user/runners and PUT /runners/:id.
type runnerFields struct {
	Description *string  `json:"description"`
	TagList     *tagList `json:"tag_list"`
	RunUntagged *boolish `json:"run_untagged"`
	Paused      *boolish `json:"paused"`
	Active      *boolish `json:"active"`
	RunnerType  *string  `json:"runner_type"`
	Locked      *boolish `json:"locked"`
	AccessLevel *string  `json:"access_level"`
	MaxTimeout  *int     `json:"maximum_timeout"`
}

// tagList accepts ["a","b"] or "a,b" (GitLab's tag_list).
type tagList []string

func (t *tagList) UnmarshalJSON(b []byte) error {
	var list []string
	if err := json.Unmarshal(b, &list); err == nil {
		*t = list
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return badRequest("tag_list must be a list of strings or a comma-separated string")
	}
	*t = splitTags(s)
	return nil
}

func splitTags(s string) []string {
	out := []string{}
	for _, part := range strings.Split(s, ",") {
		if p := strings.TrimSpace(part); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// boolish accepts true/false as JSON booleans or strings, as GitLab does.
type boolish bool

func (b *boolish) UnmarshalJSON(data []byte) error {
	v, err := parseBool(strings.Trim(string(data), `"`))
	if err != nil {
		return err
	}
	*b = boolish(v)
	return nil
}

func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "true", "1", "yes":
		return true, nil
	case "false", "0", "no":
		return false, nil
	}
	return false, badRequest("expected true or false, got %.40q", s)
}

func (h *Handler) decodeRunnerFields(r *http.Request) (runnerFields, error) {
	var f runnerFields
	if !isForm(r) {
		if r.ContentLength == 0 && r.Header.Get("Content-Type") == "" {
			return f, nil
		}
		return f, decodeJSON(r, &f, true)
	}
	if err := r.ParseForm(); err != nil {
		return f, badRequest("malformed form body: %s", err.Error())
	}
	for key, vals := range r.PostForm {
		v := vals[len(vals)-1]
		switch key {
		case "description":
			f.Description = &v
		case "tag_list", "tag_list[]":
			var tags tagList
			if key == "tag_list[]" {
				tags = vals
			} else {
				tags = splitTags(v)
			}
			f.TagList = &tags
		case "run_untagged", "paused", "active", "locked":
			b, err := parseBool(v)
			if err != nil {
				return f, badRequest("%s: expected true or false", key)
			}
			bb := boolish(b)
			switch key {
			case "run_untagged":
				f.RunUntagged = &bb
			case "paused":
				f.Paused = &bb
			case "active":
				f.Active = &bb
			case "locked":
				f.Locked = &bb
			}
		case "access_level":
			f.AccessLevel = &v
		case "runner_type", "maximum_timeout", "token":
			// Accepted for GitLab compatibility; jobapi has one runner type.
		default:
			return f, badRequest("unknown field %.40q", key)
		}
	}
	return f, nil
}

func (f runnerFields) update() (builds.RunnerUpdate, error) {
	var u builds.RunnerUpdate
	if f.Description != nil {
		if len(*f.Description) > 1024 {
			return u, badRequest("description is longer than 1024 characters")
		}
		u.Description = f.Description
	}
	if f.TagList != nil {
		tags := []string(*f.TagList)
		if len(tags) > builds.MaxTags {
			return u, badRequest("at most %d tags", builds.MaxTags)
		}
		for _, t := range tags {
			if t == "" || len(t) > builds.MaxNameLength {
				return u, badRequest("tags must be 1 to %d characters", builds.MaxNameLength)
			}
		}
		u.Tags = &tags
	}
	if f.RunUntagged != nil {
		v := bool(*f.RunUntagged)
		u.RunUntagged = &v
	}
	if f.Active != nil { // GitLab's older name: active=false means paused
		v := !bool(*f.Active)
		u.Paused = &v
	}
	if f.Paused != nil {
		v := bool(*f.Paused)
		u.Paused = &v
	}
	if f.AccessLevel != nil {
		if !builds.ValidAccessLevel(*f.AccessLevel) {
			return u, badRequest("access_level must be not_protected or ref_protected, got %.40q", *f.AccessLevel)
		}
		u.AccessLevel = f.AccessLevel
	}
	return u, nil
}

func (h *Handler) createRunner(w http.ResponseWriter, r *http.Request) error {
	f, err := h.decodeRunnerFields(r)
	if err != nil {
		return err
	}
	u, err := f.update()
	if err != nil {
		return err
	}
	created, token, err := h.svc.RegisterRunner(r.Context(), newRunner(u), actor(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, api.RunnerCreated{ID: created.ID, Token: token, TokenExpiresAt: expiryJSON(created.TokenExpiresAt)})
	return nil
}

// newRunner is a runner with the settings of u, GitLab's defaults elsewhere.
func newRunner(u builds.RunnerUpdate) builds.Runner {
	runner := builds.Runner{RunUntagged: true, AccessLevel: builds.AccessNotProtected}
	if u.Description != nil {
		runner.Description = *u.Description
	}
	if u.Tags != nil {
		runner.Tags = *u.Tags
	}
	if u.RunUntagged != nil {
		runner.RunUntagged = *u.RunUntagged
	}
	if u.Paused != nil {
		runner.Paused = *u.Paused
	}
	if u.AccessLevel != nil {
		runner.AccessLevel = *u.AccessLevel
	}
	return runner
}

func runnerView(r builds.Runner) api.Runner {
	out := api.Runner{ID: r.ID, Description: r.Description, TagList: r.Tags, RunUntagged: r.RunUntagged,
		Paused: r.Paused, Active: !r.Paused, AccessLevel: r.AccessLevel, CreatedAt: r.CreatedAt, ContactedAt: r.ContactedAt, Managers: []api.Manager{}}
	if out.TagList == nil {
		out.TagList = []string{}
	}
	for _, m := range r.Managers {
		features := map[string]bool{}
		_ = json.Unmarshal(m.Features, &features)
		out.Managers = append(out.Managers, api.Manager{SystemID: m.SystemID, Version: m.Version, Revision: m.Revision,
			Platform: m.Platform, Architecture: m.Architecture, Executor: m.Executor, Features: features, ContactedAt: m.ContactedAt, IPAddress: m.IPAddress})
	}
	return out
}

func (h *Handler) listRunners(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	list, total, err := h.svc.Runners(r.Context(), p)
	if err != nil {
		return err
	}
	out := make([]api.Runner, len(list))
	for i, rn := range list {
		out[i] = runnerView(rn)
	}
	writePage(w, p, total, out)
	return nil
}

func (h *Handler) getRunner(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "runner_id")
	if err != nil {
		return err
	}
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	rn, managers, err := h.svc.Runner(r.Context(), id, p)
	if err != nil {
		return err
	}
	// The pagination headers are the managers': the one list in the answer that grows.
	writePage(w, p, managers, runnerView(rn))
	return nil
}

func (h *Handler) updateRunner(w http.ResponseWriter, r *http.Request) error {
	id, err := pathID(r, "runner_id")
	if err != nil {
		return err
	}
	f, err := h.decodeRunnerFields(r)
	if err != nil {
		return err
	}
	u, err := f.update()
	if err != nil {
		return err
	}
	rn, err := h.svc.UpdateRunner(r.Context(), id, u, actor(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, runnerView(rn))
	return nil
}

// Pagination as GitLab does it: page/per_page in, X-Page/X-Per-Page/X-Total/X-Next-Page out.
const (
	defaultPerPage = 20
	maxPerPage     = 100
)

func pageOf(r *http.Request) (builds.Page, error) {
	p := builds.Page{Page: 1, PerPage: defaultPerPage}
	q := r.URL.Query()
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1_000_000 {
			return p, badRequest("page must be a positive integer")
		}
		p.Page = n
	}
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, badRequest("per_page must be a positive integer")
		}
		p.PerPage = min(n, maxPerPage)
	}
	return p, nil
}

func writePage(w http.ResponseWriter, p builds.Page, total int, body any) {
	w.Header().Set("X-Page", strconv.Itoa(p.Page))
	w.Header().Set("X-Per-Page", strconv.Itoa(p.PerPage))
	w.Header().Set("X-Total", strconv.Itoa(total))
	w.Header().Set("X-Total-Pages", strconv.Itoa((total+p.PerPage-1)/p.PerPage))
	next := ""
	if p.Page*p.PerPage < total {
		next = strconv.Itoa(p.Page + 1)
	}
	w.Header().Set("X-Next-Page", next)
	writeJSON(w, http.StatusOK, body)
}

func projectID(r *http.Request) (int64, error) { return pathID(r, "project_id") }

func pipelineView(p builds.Pipeline) api.Pipeline {
	out := api.Pipeline{ID: p.ID, IID: p.IID, ProjectID: p.ProjectID, Ref: p.Ref, Sha: p.SHA, BeforeSha: p.BeforeSHA,
		Source: p.Source, Status: p.Status, Stages: p.Stages,
		TimeoutStrategy: p.TimeoutStrategy, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt, FinishedAt: p.FinishedAt,
		Jobs: make([]api.PipelineJob, len(p.Builds)), Variables: make([]api.PipelineVariable, len(p.Variables))}
	for i, v := range p.Variables {
		out.Variables[i] = api.PipelineVariable{Key: v.Key, VariableType: builds.VariableEnv}
		if v.File {
			out.Variables[i].VariableType = builds.VariableFile
		}
	}
	for i, b := range p.Builds {
		out.Jobs[i] = api.PipelineJob{ID: b.ID, Name: b.Name, Stage: b.Stage, Status: string(b.Status),
			Attempt: b.Attempt, RetryOf: nonZero(b.RetryOf), RetriedBy: nonZero(b.RetriedBy), Bridge: b.Bridge}
	}
	out.ParentPipelineID, out.ParentJobID = nonZero(p.ParentPipelineID), nonZero(p.ParentBuildID)
	if c, ok := p.Coverage(); ok {
		s := strconv.FormatFloat(c, 'f', 2, 64)
		out.Coverage = &s
	}
	return out
}

func nonZero(v int64) *int64 {
	if v == 0 {
		return nil
	}
	return &v
}

func (h *Handler) createPipeline(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	if isForm(r) {
		return &httpError{code: http.StatusUnsupportedMediaType, msg: "a pipeline definition must be sent as JSON, or as .gitlab-ci.yml with Content-Type application/yaml"}
	}
	var def builds.PipelineDefinition
	fromYAML := isYAML(r)
	if fromYAML {
		req, err := yamlRequest(r)
		if err != nil {
			return err
		}
		if def, _, err = h.compile(r, pid, req); err != nil {
			return err
		}
	} else {
		var req pipelineRequest
		if err := decodeJSON(r, &req, true); err != nil {
			return err
		}
		if req.CIConfig != nil {
			if len(req.Stages) > 0 || len(req.Jobs) > 0 {
				return badRequest("send either ci_config (.gitlab-ci.yml text) or stages and jobs, not both")
			}
			ci := ciRequest{Ref: req.Ref, SHA: req.Sha, Config: []byte(*req.CIConfig), TimeoutStrategy: req.TimeoutStrategy,
				Origin: req.pipelineOrigin}
			if def, _, err = h.compile(r, pid, ci); err != nil {
				return err
			}
			fromYAML = true
		} else {
			def = req.definition(pid)
		}
	}
	p, err := h.svc.CreatePipeline(r.Context(), def)
	if err != nil {
		return err
	}
	if fromYAML {
		// GitLab's auto-cancel of redundant pipelines, once the new one is committed; a
		// client that goes away does not stop it halfway.
		h.svc.CancelRedundant(context.WithoutCancel(r.Context()), p)
	}
	out := pipelineView(p)
	if out.GitStrategy, err = h.gitStrategy(r, pid); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

func (h *Handler) pipeline(r *http.Request) (builds.Pipeline, error) {
	pid, err := projectID(r)
	if err != nil {
		return builds.Pipeline{}, err
	}
	id, err := pathID(r, "pipeline_id")
	if err != nil {
		return builds.Pipeline{}, err
	}
	return h.svc.Pipeline(r.Context(), pid, id)
}

func (h *Handler) getPipeline(w http.ResponseWriter, r *http.Request) error {
	p, err := h.pipeline(r)
	if err != nil {
		return err
	}
	out := pipelineView(p)
	if out.GitStrategy, err = h.gitStrategy(r, p.ProjectID); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getPipelineJobs pages like every list endpoint (SPEC §7): a pipeline of thousands of
// jobs would otherwise be one response of megabytes.
func (h *Handler) getPipelineJobs(w http.ResponseWriter, r *http.Request) error {
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	p, err := h.pipeline(r)
	if err != nil {
		return err
	}
	// GitLab lists a pipeline's trigger jobs apart (…/bridges), not among its jobs.
	jobsOnly := slices.DeleteFunc(p.Builds, func(b builds.Build) bool { return b.Bridge })
	from := min((pg.Page-1)*pg.PerPage, len(jobsOnly))
	to := min(from+pg.PerPage, len(jobsOnly))
	views := make([]builds.JobView, 0, to-from)
	for _, b := range jobsOnly[from:to] {
		views = append(views, builds.JobView{Build: b})
	}
	if err := h.svc.WithArtifacts(r.Context(), views); err != nil {
		return err
	}
	jobs := make([]api.JobDetail, len(views))
	for i, v := range views {
		jobs[i] = jobView(v)
	}
	writePage(w, pg, len(jobsOnly), jobs)
	return nil
}

// getPipelineBridges is GitLab's GET /projects/:id/pipelines/:pipeline_id/bridges: the
// pipeline's trigger jobs with their downstream (child) pipelines, paged.
func (h *Handler) getPipelineBridges(w http.ResponseWriter, r *http.Request) error {
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	id, err := pathID(r, "pipeline_id")
	if err != nil {
		return err
	}
	p, err := h.svc.Pipeline(r.Context(), pid, id)
	if err != nil {
		return err
	}
	list, err := h.svc.Bridges(r.Context(), pid, id)
	if err != nil {
		return err
	}
	from := min((pg.Page-1)*pg.PerPage, len(list))
	to := min(from+pg.PerPage, len(list))
	out := make([]api.Bridge, 0, to-from)
	for _, v := range list[from:to] {
		out = append(out, bridgeView(p, v))
	}
	writePage(w, pg, len(list), out)
	return nil
}

func bridgeView(p builds.Pipeline, v builds.BridgeView) api.Bridge {
	b := v.Build
	name, refType := splitRef(p.Ref)
	out := api.Bridge{ID: b.ID, Name: b.Name, Stage: b.Stage, Status: string(b.Status), Ref: name, Tag: refType == "tag",
		AllowFailure: b.AllowFailure, CreatedAt: b.CreatedAt, StartedAt: b.StartedAt, FinishedAt: b.FinishedAt,
		Attempt: b.Attempt, RetryOf: nonZero(b.RetryOf), RetriedBy: nonZero(b.RetriedBy),
		Pipeline: api.BridgePipeline{ID: p.ID, IID: p.IID, ProjectID: p.ProjectID, Sha: p.SHA, Ref: p.Ref,
			Status: p.Status, Source: p.Source, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt}}
	if out.StartedAt != nil && b.QueuedAt != nil {
		q := out.StartedAt.Sub(*b.QueuedAt).Seconds()
		out.QueuedDuration = &q
	}
	if out.StartedAt != nil && b.FinishedAt != nil {
		d := b.FinishedAt.Sub(*out.StartedAt).Seconds()
		out.Duration = &d
	}
	if b.FailureReason != "" {
		reason := b.FailureReason
		out.FailureReason = &reason
	}
	if t := b.Payload.Trigger; t != nil {
		for _, inc := range t.Include {
			out.Trigger.Include = append(out.Trigger.Include, inc.Local)
		}
		if t.Strategy != "" {
			s := t.Strategy
			out.Trigger.Strategy = &s
		}
	}
	if d := v.Downstream; d != nil {
		out.DownstreamPipeline = &api.BridgePipeline{ID: d.ID, IID: d.IID, ProjectID: d.ProjectID, Sha: d.SHA,
			Ref: d.Ref, Status: d.Status, Source: d.Source, CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt}
	}
	return out
}

func (h *Handler) cancelPipeline(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	id, err := pathID(r, "pipeline_id")
	if err != nil {
		return err
	}
	p, err := h.svc.CancelPipeline(r.Context(), pid, id, actor(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, pipelineView(p))
	return nil
}

func jobView(v builds.JobView) api.JobDetail {
	b := v.Build
	out := api.JobDetail{ID: b.ID, ProjectID: b.ProjectID, PipelineID: b.PipelineID, Name: b.Name, Stage: b.Stage,
		Status: string(b.Status), Attempt: b.Attempt, RetryOf: nonZero(b.RetryOf), RetriedBy: nonZero(b.RetriedBy),
		TwoPhase: b.TwoPhase, Tags: b.Tags, Timeout: b.TimeoutSeconds, AllowFailure: b.AllowFailure,
		CreatedAt: b.CreatedAt, QueuedAt: b.QueuedAt, AssignedAt: b.AssignedAt, StartedAt: b.StartedAt,
		FinishedAt: b.FinishedAt, ExitCode: b.ExitCode, TraceSize: b.TraceSize,
		When: b.Payload.When, ScheduledAt: b.ScheduledAt, Coverage: b.Coverage}
	if out.When == "" {
		out.When = builds.WhenOnSuccess
	}
	if out.Tags == nil {
		out.Tags = []string{}
	}
	if b.FailureReason != "" {
		reason := b.FailureReason
		out.FailureReason = &reason
	}
	if b.RunnerID != 0 {
		out.Runner = &api.JobRunner{ID: b.RunnerID}
	}
	if b.RunnerSystemID != "" {
		out.RunnerManager = &api.JobRunnerManager{SystemID: b.RunnerSystemID}
	}
	if v.Artifacts != nil {
		out.Artifacts = make([]api.JobArtifact, len(v.Artifacts))
		for i, a := range v.Artifacts {
			out.Artifacts[i] = artifactJSON(a)
			if a.FileType == builds.ArtifactTypeArchive {
				out.ArtifactsFile = &api.ArtifactsFile{Filename: a.Filename, Size: a.Size}
				out.ArtifactsExpireAt = a.ExpireAt
			}
		}
	}
	if b.Status == builds.StatusWaiting {
		ack := &api.JobAck{Deadline: b.AckDeadline}
		if v.AckTTL != nil {
			secs := v.AckTTL.Seconds()
			ack.TTLSeconds = &secs
		}
		out.Ack = ack
	}
	return out
}

func (h *Handler) jobIDs(r *http.Request) (int64, int64, error) {
	pid, err := projectID(r)
	if err != nil {
		return 0, 0, err
	}
	id, err := jobID(r)
	return pid, id, err
}

func (h *Handler) getJob(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	v, err := h.svc.Job(r.Context(), pid, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jobView(v))
	return nil
}

func (h *Handler) getTrace(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	trace, err := h.svc.OpenTrace(r.Context(), pid, id)
	if err != nil {
		return err
	}
	defer trace.Close()
	if h.traceWatch != nil && trace.Archive == nil {
		// Someone is reading a live log: ask the runner for updates every few seconds.
		if err := h.traceWatch.Watch(r.Context(), id); err != nil {
			h.log.DebugContext(r.Context(), "trace watch not recorded", "error", err)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-cache")
	var modified time.Time
	if trace.Archive != nil {
		// An archived log never changes: its SHA-256 is a strong validator (If-None-Match,
		// If-Range). A live log has none, so a Range is always served from what it holds now.
		w.Header().Set("ETag", `"`+hex.EncodeToString(trace.Archive.SHA256)+`"`)
		modified = trace.Archive.CreatedAt
	}
	if rng := r.Header.Get("Range"); rng != "" && !strings.HasPrefix(rng, "bytes=") {
		// A unit other than bytes is ignored (RFC 9110 §14.2), not refused as net/http does.
		r.Header.Del("Range")
	}
	// Ranges (bytes=N-, N-M, -N) answer 206 with Content-Range; a start past the end is a
	// 416 with Content-Range: bytes */size, which a tail reads as "nothing new yet"; a
	// malformed range (bytes=9-3) is a 416.
	http.ServeContent(w, r, "", modified, trace)
	return nil
}

func (h *Handler) getEvents(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	events, total, err := h.svc.Events(r.Context(), pid, id, p)
	if err != nil {
		return err
	}
	out := make([]api.Event, len(events))
	for i, e := range events {
		out[i] = api.Event{ID: e.ID, Type: e.Type, At: e.At, RunnerManager: e.RunnerManager, Detail: e.Detail}
		if out[i].Detail == nil {
			out[i].Detail = map[string]any{}
		}
	}
	writePage(w, p, total, out)
	return nil
}

// actor names who did an operator action in the event history. There is one admin token,
// so the actor is "admin" plus the request id that links the event to the access log.
func actor(r *http.Request) string {
	return "admin (request " + RequestID(r.Context()) + ")"
}

func (h *Handler) cancelJob(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	v, err := h.svc.CancelJob(r.Context(), pid, id, actor(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jobView(v))
	return nil
}

func (h *Handler) retryJob(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	v, err := h.svc.RetryJob(r.Context(), pid, id, actor(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, jobView(v))
	return nil
}

// playJob is GitLab's POST /projects/:id/jobs/:job_id/play: a manual job becomes pending.
func (h *Handler) playJob(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	v, err := h.svc.PlayJob(r.Context(), pid, id, actor(r))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, jobView(v))
	return nil
}

func (h *Handler) listJobs(w http.ResponseWriter, r *http.Request) error {
	raw := r.URL.Query().Get("status")
	if raw == "" {
		raw = r.URL.Query().Get("scope")
	}
	if raw == "" {
		return badRequest("status is required, one of %s", statusNames())
	}
	status, ok := builds.ParseStatus(raw)
	if !ok {
		return badRequest("unknown status %.40q, expected one of %s", raw, statusNames())
	}
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	views, total, err := h.svc.Jobs(r.Context(), status, p)
	if err != nil {
		return err
	}
	if err := h.svc.WithArtifacts(r.Context(), views); err != nil {
		return err
	}
	out := make([]api.JobDetail, len(views))
	for i, v := range views {
		out[i] = jobView(v)
	}
	writePage(w, p, total, out)
	return nil
}

func statusNames() string {
	names := make([]string, len(builds.AllStatuses))
	for i, s := range builds.AllStatuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

func (h *Handler) listAuditEvents(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	events, total, err := h.svc.AuditEvents(r.Context(), p)
	if err != nil {
		return err
	}
	out := make([]api.AuditEvent, len(events))
	for i, e := range events {
		out[i] = api.AuditEvent{ID: e.ID, At: e.At, Actor: e.Actor, Action: e.Action, Target: e.Target, Detail: e.Detail}
		if out[i].Detail == nil {
			out[i].Detail = map[string]any{}
		}
	}
	writePage(w, p, total, out)
	return nil
}
