// Runner protocol, the job loop. POST /jobs/request takes the runner's token (in the body or
// RUNNER-TOKEN); PUT /jobs/:id takes the job's token (JOB-TOKEN or in the body).

package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// jobRequestFields is api.JobRequest with the runner's features left as bytes, parsed
// through h.features (the same object comes with every poll).
type jobRequestFields struct {
	Token      string `json:"token"`
	SystemID   string `json:"system_id"`
	LastUpdate string `json:"last_update"`
	Info       struct {
		api.RunnerInfo
		Features json.RawMessage `json:"features"`
	} `json:"info"`
}

func (h *Handler) requestJob(w http.ResponseWriter, r *http.Request) error {
	var req jobRequestFields
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	features, err := h.features.parse(req.Info.Features)
	if err != nil {
		return err
	}
	info := req.Info.RunnerInfo
	info.Features = features.all
	if !validSystemID(req.SystemID) {
		return badRequest("system_id must be at most 128 letters, digits or _-.:")
	}
	if len(req.LastUpdate) > 128 {
		return badRequest("last_update is longer than 128 characters")
	}
	token := runnerToken(r, req.Token)
	// The signer is ready before a job is claimed: a job with id_tokens must not be taken
	// from the queue and then fail for want of its key (Postgres away at the first load).
	// Loaded once per replica, then this is a mutex and a pointer.
	var signer IDTokenSigner
	if h.idTokens != nil {
		var err error
		if signer, err = h.idTokens(r.Context()); err != nil {
			return err
		}
	}
	if err := h.limit(r, "jobs_request", token, h.limits.JobsRequest); err != nil {
		h.metrics.jobRequests.WithLabelValues("rate_limited").Inc()
		return err
	}
	jr := builds.JobRequest{
		Token: token, SystemID: req.SystemID, LastUpdate: req.LastUpdate,
		Info: managerInfo(r, info), TwoPhaseCapable: features.twoPhase,
	}
	if h.parking != nil {
		jr.Detach = h.newParkedRequest(w, r, signer)
	}
	a, err := h.svc.RequestJob(r.Context(), jr)
	if errors.Is(err, builds.ErrDetached) {
		return nil // answered, counted and logged by its parkedRequest
	}
	h.metrics.jobRequests.WithLabelValues(jobRequestResult(err)).Inc()
	if err != nil {
		return err
	}
	return h.writeAssigned(w, r, a, signer)
}

// writeAssigned answers 201 with the job a hands out. No X-GitLab-Last-Update on a 201 (GitLab
// sends it only with 204): gitlab-runner keeps the header from any answer and echoes it, so
// the next poll would get the cached 204 while other builds are still pending, until
// something bumps the queue.
//
// Never inlined into requestJob: the payload (api.Job, some 4 KB) would then sit in
// requestJob's frame, on the stack of every request the long poll holds.
//
//go:noinline
func (h *Handler) writeAssigned(w http.ResponseWriter, r *http.Request, a *builds.Assignment, signer IDTokenSigner) error {
	job, err := h.jobPayload(r, *a, signer)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, job)
	return nil
}

func jobRequestResult(err error) string {
	var noJob *builds.NoJobError
	switch {
	case err == nil:
		return "assigned"
	case errors.As(err, &noJob):
		return "no_job"
	case errors.Is(err, builds.ErrRunnerForbidden):
		return "forbidden"
	case errors.Is(err, context.Canceled):
		return "client_gone"
	case unavailable(err):
		return "unavailable"
	}
	return "error"
}

func jobToken(r *http.Request, body string) string {
	if t := r.Header.Get("JOB-TOKEN"); t != "" {
		return t
	}
	return body
}

// jobUpdateFields is the part of api.UpdateJobRequest that the PUT table reads, plus
// output, whose type is still checked. The decoder skips the rest (the runner's info, sent
// with every update) without building it: decoding it was a sixth of an ack's CPU.
type jobUpdateFields struct {
	Token         string         `json:"token"`
	State         string         `json:"state"`
	FailureReason string         `json:"failure_reason"`
	ExitCode      *int64         `json:"exit_code"`
	Output        *api.JobOutput `json:"output"`
}

func (h *Handler) updateJob(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	var req jobUpdateFields
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	token := jobToken(r, req.Token)
	u := builds.JobUpdate{ID: id, Token: token, State: req.State, FailureReason: req.FailureReason, ExitCode: req.ExitCode}
	if h.jobLimited() {
		// limitJob's budgets, applied by the service once it knows the token's check.
		u.Admit = h.admitJob(r, "job_update", id)
	}
	if req.Output != nil {
		u.Bytesize = req.Output.Bytesize // the service refuses a negative one
	}
	status, err := h.svc.UpdateJob(r.Context(), u)
	if err != nil {
		return err
	}
	w.Header().Set("Job-Status", string(status))
	writeJSON(w, http.StatusOK, map[string]string{"status": string(status)})
	return nil
}
