// Operator API, jobs: a member's personal access token, or an administrator's (or the admin
// token), in PRIVATE-TOKEN or Authorization: Bearer; each route's action (h.can in routes.go)
// decides by the caller's role (builds/access). The instance's job list is administrators' (access.ReadInstance).
// What the runner calls on a job is in runner_jobs.go.

package handlers

import (
	"net/http"
	"strings"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

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
	if err == nil {
		v.Artifacts, err = h.arts.Artifacts(r.Context(), id)
	}
	if err != nil {
		return err
	}
	return h.writeJob(w, r, http.StatusOK, v)
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

func (h *Handler) cancelJob(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	// GitLab's force=true ends a job stuck in canceling at once.
	force, err := queryBool(r.URL.Query().Get("force"), "force")
	if err != nil {
		return err
	}
	cancel := h.svc.CancelJob
	if force {
		cancel = h.svc.ForceCancelJob
	}
	v, err := cancel(r.Context(), pid, id)
	if err != nil {
		return err
	}
	return h.writeJob(w, r, http.StatusOK, v)
}

func (h *Handler) retryJob(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	v, err := h.svc.RetryJob(r.Context(), pid, id)
	if err != nil {
		return err
	}
	return h.writeJob(w, r, http.StatusCreated, v)
}

// playJob is GitLab's POST /projects/:id/jobs/:job_id/play: a manual job becomes pending.
func (h *Handler) playJob(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	v, err := h.svc.PlayJob(r.Context(), pid, id)
	if err != nil {
		return err
	}
	return h.writeJob(w, r, http.StatusOK, v)
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
	if err := h.arts.WithArtifacts(r.Context(), views); err != nil {
		return err
	}
	out, err := h.jobDetails(r, views)
	if err != nil {
		return err
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
