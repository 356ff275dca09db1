package runnerclient

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers the runner reads on job endpoints (network/remote_job_state_response.go).
const (
	headerJobStatus      = "Job-Status"
	headerUpdateInterval = "X-GitLab-Trace-Update-Interval"
	headerRange          = "Range"
	headerLastUpdate     = "X-GitLab-Last-Update"
)

// UpdateState mirrors common.UpdateState: how the runner reads the answer to
// PUT /jobs/:id.
type UpdateState int

const (
	UpdateSucceeded               UpdateState = iota + 1 // 200
	UpdateAcceptedButNotCompleted                        // 202: wait and resend
	UpdateTraceValidationFailed                          // 412: resend the whole trace, then the update
	UpdateAbort                                          // stop: the job is no longer ours
	UpdateFailed                                         // anything else: retry later, the job keeps running
)

func (s UpdateState) String() string {
	switch s {
	case UpdateSucceeded:
		return "succeeded"
	case UpdateAcceptedButNotCompleted:
		return "accepted-but-not-completed"
	case UpdateTraceValidationFailed:
		return "trace-validation-failed"
	case UpdateAbort:
		return "abort"
	case UpdateFailed:
		return "failed"
	}
	return fmt.Sprintf("UpdateState(%d)", int(s))
}

// PatchState mirrors common.PatchState: how the runner reads the answer to
// PATCH /jobs/:id/trace.
type PatchState int

const (
	PatchSucceeded     PatchState = iota + 1 // 202
	PatchNotFound                            // 404
	PatchAbort                               // stop the job
	PatchRangeMismatch                       // 416: resend from the server's length
	PatchFailed                              // anything else: retry later
)

func (s PatchState) String() string {
	switch s {
	case PatchSucceeded:
		return "succeeded"
	case PatchNotFound:
		return "not-found"
	case PatchAbort:
		return "abort"
	case PatchRangeMismatch:
		return "range-mismatch"
	case PatchFailed:
		return "failed"
	}
	return fmt.Sprintf("PatchState(%d)", int(s))
}

// UpdateResult is the answer to one PUT /jobs/:id, classified.
type UpdateResult struct {
	Code            int // HTTP status; 0 when no response arrived
	State           UpdateState
	CancelRequested bool          // Job-Status: canceling
	UpdateInterval  time.Duration // X-GitLab-Trace-Update-Interval; 0 when absent or not an integer
	JobStatus       string        // the Job-Status header
	Header          http.Header
}

// PatchResult is the answer to one PATCH /jobs/:id/trace, classified.
type PatchResult struct {
	Code  int // HTTP status; 0 when no response arrived
	State PatchState
	// Offset is where the next patch starts: end+1 after a 202, the
	// server's length (from Range) after a 416, the sent start otherwise.
	Offset          int
	CancelRequested bool
	UpdateInterval  time.Duration
	JobStatus       string
	Range           string // the Range header
	Header          http.Header
}

// remoteJobState mirrors RemoteJobStateResponse: the part of the answer that
// PUT and PATCH share.
type remoteJobState struct {
	code     int
	status   string
	interval time.Duration
}

func readRemoteJobState(code int, h http.Header) remoteJobState {
	s := remoteJobState{code: code, status: h.Get(headerJobStatus)}
	// The runner ignores (and logs) a value that is not an integer.
	if n, err := strconv.Atoi(h.Get(headerUpdateInterval)); err == nil {
		s.interval = time.Duration(n) * time.Second
	}
	return s
}

// isFailed mirrors RemoteJobStateResponse.IsFailed: the job is gone for this
// runner. A 403 counts whatever Job-Status says; a 409 does not.
func (s remoteJobState) isFailed() bool {
	return s.status == "canceled" || s.status == "failed" || s.code == http.StatusForbidden
}

// isCanceled mirrors RemoteJobStateResponse.IsCanceled: a graceful cancel.
func (s remoteJobState) isCanceled() bool { return s.status == "canceling" }

// classifyUpdate mirrors GitLabClient.createUpdateJobResult. The order of the
// checks matters: Job-Status failed/canceled wins over any code, and code 0
// (the runner's clientError: no response at all) aborts.
func classifyUpdate(code int, h http.Header) UpdateResult {
	if h == nil {
		h = http.Header{}
	}
	s := readRemoteJobState(code, h)
	r := UpdateResult{
		Code:            code,
		CancelRequested: s.isCanceled(),
		UpdateInterval:  s.interval,
		JobStatus:       s.status,
		Header:          h,
	}
	switch {
	case s.isFailed():
		r.State = UpdateAbort
	case code == http.StatusOK:
		r.State = UpdateSucceeded
	case code == http.StatusAccepted:
		r.State = UpdateAcceptedButNotCompleted
	case code == http.StatusPreconditionFailed:
		r.State = UpdateTraceValidationFailed
	case code == http.StatusNotFound, code == 0:
		r.State = UpdateAbort
	default:
		r.State = UpdateFailed
	}
	return r
}

// classifyPatch mirrors GitLabClient.createPatchTraceResult for a patch of
// the bytes [start, end). A transport error never gets here: PatchTrace
// returns PatchFailed for it, as the runner does.
func classifyPatch(code int, h http.Header, start, end int) PatchResult {
	if h == nil {
		h = http.Header{}
	}
	s := readRemoteJobState(code, h)
	r := PatchResult{
		Code:            code,
		Offset:          start,
		CancelRequested: s.isCanceled(),
		UpdateInterval:  s.interval,
		JobStatus:       s.status,
		Range:           h.Get(headerRange),
		Header:          h,
	}
	switch {
	case s.isFailed():
		r.State = PatchAbort
	case code == http.StatusAccepted:
		r.State = PatchSucceeded
		r.Offset = end
	case code == http.StatusNotFound:
		r.State = PatchNotFound
	case code == http.StatusRequestedRangeNotSatisfiable:
		r.State = PatchRangeMismatch
		r.Offset = rangeEnd(r.Range)
	default:
		r.State = PatchFailed
	}
	return r
}

// rangeEnd mirrors TracePatchResponse.NewOffset: the number after "-" in
// "0-<length>", and 0 (resend everything) when the header is missing or odd.
func rangeEnd(v string) int {
	parts := strings.Split(v, "-")
	if len(parts) != 2 {
		return 0
	}
	n, _ := strconv.Atoi(parts[1])
	return n
}

// contentRange is the runner's Content-Range for n bytes at start: the end is
// inclusive (start+n-1). GitLab ignores the end because of this off-by-one
// (gitlab-runner#3275), but a server must accept it.
func contentRange(start, n int) string {
	return fmt.Sprintf("%d-%d", start, start+n-1)
}
