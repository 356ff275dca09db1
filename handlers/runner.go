package handlers

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

func managerInfo(r *http.Request, in api.RunnerInfo) builds.ManagerInfo {
	features := in.Features
	return builds.ManagerInfo{Version: clip(in.Version), Revision: clip(in.Revision), Platform: clip(in.Platform),
		Architecture: clip(in.Architecture), Executor: clip(in.Executor), Shell: clip(in.Shell), Features: features,
		IPAddress: clientAddr(r)}
}

// maxReported bounds runner-reported strings before they reach the database.
const maxReported = 255

// clip cuts s to at most maxReported bytes on a character boundary: half a UTF-8 sequence
// is invalid text, which Postgres refuses.
func clip(s string) string {
	if len(s) <= maxReported {
		return s
	}
	i := maxReported
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}

func runnerToken(r *http.Request, body string) string {
	if body != "" {
		return body
	}
	return r.Header.Get("RUNNER-TOKEN")
}

// validSystemID: systemIDs are "s_" or "r_" plus hex in practice; anything printable and
// short is kept. A loop rather than a regexp: it runs on every job request.
func validSystemID(id string) bool {
	return len(id) <= 128 && onlyBytes(id, "_<>.:-")
}

// onlyBytes reports whether s holds only ASCII letters, digits and the bytes of extra.
func onlyBytes(s, extra string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte(extra, c) >= 0 {
			continue
		}
		return false
	}
	return true
}

func (h *Handler) verifyRunner(w http.ResponseWriter, r *http.Request) error {
	var req api.VerifyRequest
	if err := decodeJSON(r, &req, false); err != nil {
		return err
	}
	if !validSystemID(req.SystemID) {
		return badRequest("system_id must be at most 128 letters, digits or _-.:")
	}
	token := runnerToken(r, req.Token)
	if err := h.limit(r, "runners_verify", token, h.limits.RunnerVerify); err != nil {
		return err
	}
	runner, err := h.svc.VerifyRunner(r.Context(), token, req.SystemID, managerInfo(r, req.Info))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.VerifyResponse{ID: runner.ID, Token: token, TokenExpiresAt: expiryJSON(runner.TokenExpiresAt)})
	return nil
}

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
	a, err := h.svc.RequestJob(r.Context(), builds.JobRequest{
		Token: token, SystemID: req.SystemID, LastUpdate: req.LastUpdate,
		Info: managerInfo(r, info), TwoPhaseCapable: features.twoPhase,
	})
	h.metrics.jobRequests.WithLabelValues(jobRequestResult(err)).Inc()
	if err != nil {
		return err
	}
	// No X-GitLab-Last-Update on a 201 (GitLab sends it only with 204): gitlab-runner keeps
	// the header from any answer and echoes it, so the next poll would get the cached 204
	// while other builds are still pending, until something bumps the queue.
	job, err := h.jobPayload(r, a, signer)
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
	case unavailable(err):
		return "unavailable"
	}
	return "error"
}

func jobID(r *http.Request) (int64, error) {
	return pathID(r, "job_id")
}

func pathID(r *http.Request, name string) (int64, error) {
	v := chi.URLParam(r, name)
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id <= 0 {
		return 0, badRequest("%s must be a positive integer, got %.40q", name, v)
	}
	return id, nil
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

// contentRange parses "start-end" (end inclusive, as gitlab-runner sends it). Like GitLab,
// only start decides where the body goes; end must agree with the body's length.
var contentRangePattern = regexp.MustCompile(`^(?:bytes )?(\d{1,15})-(\d{1,15})$`)

// ParseContentRange returns the start offset of a trace patch of n bytes.
func ParseContentRange(header string, n int) (int64, error) {
	if header == "" {
		return 0, errors.New("missing header Content-Range")
	}
	m := contentRangePattern.FindStringSubmatch(strings.TrimSpace(header))
	if m == nil {
		return 0, fmt.Errorf("Content-Range must be start-end, got %.40q", header)
	}
	start, _ := strconv.ParseInt(m[1], 10, 64)
	end, _ := strconv.ParseInt(m[2], 10, 64)
	if end < start-1 {
		return 0, fmt.Errorf("Content-Range end %d is before start %d", end, start)
	}
	if n > 0 && end-start+1 != int64(n) {
		return 0, fmt.Errorf("Content-Range %d-%d does not match a body of %d bytes", start, end, n)
	}
	return start, nil
}

func (h *Handler) patchTrace(w http.ResponseWriter, r *http.Request) error {
	id, err := jobID(r)
	if err != nil {
		return err
	}
	token := jobToken(r, "")
	if err := h.limitJob(r, "job_trace", id, token); err != nil {
		return err
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	start, err := ParseContentRange(r.Header.Get("Content-Range"), len(data))
	if err != nil {
		return badRequest("%s", err.Error())
	}
	res, err := h.svc.AppendTrace(r.Context(), id, token, start, data)
	if err != nil {
		return err
	}
	interval := traceIntervalIdle
	if h.traceWatch != nil {
		if watched, err := h.traceWatch.Watched(r.Context(), id); err == nil && watched {
			interval = traceIntervalWatched
		}
	}
	w.Header().Set("Job-Status", string(res.Status))
	w.Header().Set("Range", "0-"+strconv.FormatInt(res.Size, 10))
	w.Header().Set("X-GitLab-Trace-Update-Interval", strconv.Itoa(int(interval.Seconds())))
	writeJSON(w, http.StatusAccepted, map[string]string{"status": string(res.Status)})
	return nil
}
