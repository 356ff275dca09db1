package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/builds/claimpacing"
	"github.com/jobapi/jobapi/builds/users"
	"github.com/jobapi/jobapi/gitref"
)

// httpError is an error with the status and client message already decided.
type httpError struct {
	code   int
	msg    string
	header http.Header
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{code: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// wrap turns a handler that returns an error into an http.HandlerFunc; the error table
// below is the only place that chooses statuses for failures.
func (h *Handler) wrap(fn func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := fn(w, r); err != nil {
			h.fail(w, r, err)
		}
	}
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	var (
		he       *httpError
		verr     *builds.ValidationError
		refErr   *gitref.Error
		jf       *builds.JobForbiddenError
		noJob    *builds.NoJobError
		rangeErr *builds.TraceRangeError
		partial  *builds.TraceIncompleteError
		tooBig   *http.MaxBytesError
		limited  *rateLimitError
		managers *builds.ManagerLimitError
		shed     *claimpacing.OverloadError
		tooLarge *artifacts.TooLargeError
		damaged  *artifacts.ArchiveError
		taken    *users.TakenError
	)
	if msg, ok := ciConfigError(err); ok {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	switch {
	case errors.As(err, &he):
		for k, vs := range he.header {
			w.Header()[k] = vs
		}
		writeError(w, he.code, he.msg)
	case errors.As(err, &limited):
		writeRateLimited(w, limited.d)
	case errors.As(err, &shed):
		// gitlab-runner retries a 503 after Retry-After and keeps the runner healthy; the
		// service counts what it shed (metrics, and its summary in the log).
		w.Header().Set("Retry-After", strconv.Itoa(max(int(shed.RetryAfter.Seconds()), 1)))
		writeError(w, http.StatusServiceUnavailable, "503 Service Unavailable - overloaded, retry later")
	case errors.As(err, &managers):
		// Not a 400: gitlab-runner backs off on a 429 (Retry-After) instead of polling on,
		// and an operator removing stale managers lifts it.
		w.Header().Set("Retry-After", "60")
		writeError(w, http.StatusTooManyRequests, fmt.Sprintf("429 Too Many Requests - runner %d already has %d managers "+
			"(system_ids), its limit: remove stale ones or raise JOBAPI_MAX_MANAGERS_PER_RUNNER", managers.RunnerID, managers.Max))
	case errors.As(err, &noJob):
		if noJob.LastUpdate != "" {
			w.Header().Set("X-GitLab-Last-Update", noJob.LastUpdate)
		}
		w.WriteHeader(http.StatusNoContent)
	case errors.As(err, &jf):
		if jf.Status != "" {
			w.Header().Set("Job-Status", string(jf.Status))
		}
		writeError(w, http.StatusForbidden, jobForbiddenMessage(jf))
	case errors.As(err, &rangeErr):
		w.Header().Set("Range", "0-"+strconv.FormatInt(rangeErr.Size, 10))
		writeError(w, http.StatusRequestedRangeNotSatisfiable, "416 Range Not Satisfiable")
	case errors.As(err, &partial):
		// gitlab-runner rewinds its trace on a 412 and PATCHes it again (the 416s take it to
		// where the server's log ends), then resends the final update.
		writeError(w, http.StatusPreconditionFailed, "412 Precondition Failed - "+partial.Error())
	case errors.As(err, &taken):
		writeError(w, http.StatusConflict, taken.Error())
	case errors.As(err, &verr):
		writeError(w, http.StatusBadRequest, verr.Msg)
	case errors.As(err, &refErr):
		writeError(w, http.StatusBadRequest, refErr.Msg)
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", tooBig.Limit))
	case errors.As(err, &tooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, artifactTooLarge(tooLarge))
	case errors.As(err, &damaged):
		writeError(w, http.StatusBadRequest, "400 Bad Request - "+damaged.Error())
	case errors.Is(err, artifacts.ErrExists):
		writeError(w, http.StatusBadRequest, "400 Bad Request - "+artifacts.ErrExists.Error())
	case errors.Is(err, builds.ErrUploadExpired):
		writeError(w, http.StatusRequestTimeout, "408 Request Timeout - "+builds.ErrUploadExpired.Error()+" (JOBAPI_ARTIFACT_UPLOAD_TIMEOUT)")
	case errors.Is(err, artifacts.ErrNotAccessible):
		writeError(w, http.StatusForbidden, "403 Forbidden - "+artifacts.ErrNotAccessible.Error())
	case errors.Is(err, builds.ErrRunnerForbidden):
		writeError(w, http.StatusForbidden, "403 Forbidden")
	case errors.Is(err, builds.ErrNotFound):
		writeError(w, http.StatusNotFound, "404 Not Found")
	case errors.Is(err, builds.ErrFinished), errors.Is(err, builds.ErrNotRetryable):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, builds.ErrNULCharacter):
		// The store's text cannot hold NUL: the client sent "\u0000" somewhere.
		writeError(w, http.StatusBadRequest, "strings must not contain NUL (\\u0000) characters")
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away; nobody reads an answer.
		h.log.DebugContext(r.Context(), "client gone", "error", err)
	case errors.Is(err, builds.ErrConflict):
		// The build kept changing under the compare-and-set, round after round: a moment
		// later it has settled. gitlab-runner retries a 503 by itself; a 500 would read as
		// a bug, and a 409 would make the runner carry on without its update.
		h.log.WarnContext(r.Context(), "build kept changing concurrently", "error", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "503 Service Unavailable - the job changed concurrently; try again")
	case unavailable(err):
		// Counted, and logged once per interval: a backend that is slow for everyone
		// would log a line per request.
		h.faults.Count(r.Context(), "backend_unavailable", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "503 Service Unavailable - try again")
	default:
		// Among them a broken constraint (*builds.ConstraintError) or builds.ErrContention
		// from the store: a bug or a race nobody planned for, to be read in the log.
		h.log.ErrorContext(r.Context(), "request failed", "error", err)
		writeError(w, http.StatusInternalServerError, "500 Internal Server Error")
	}
}

// jobForbiddenMessage is the 403 text of a refused job call, as GitLab words it.
func jobForbiddenMessage(e *builds.JobForbiddenError) string {
	switch e.Cause {
	case builds.InvalidJobToken:
		return "403 Forbidden - invalid job token"
	case builds.NotProcessing:
		return fmt.Sprintf("403 Forbidden - job is not processing on runner (status %s)", e.Status)
	case builds.ProvisioningTimedOut:
		return "403 Forbidden - provisioning took longer than the maximum wait"
	case builds.NotRunning:
		return fmt.Sprintf("403 Forbidden - job is not running (status %s)", e.Status)
	case builds.TraceTooLarge:
		return "403 Forbidden - trace size exceeded"
	case builds.NotADependency:
		return "403 Forbidden - the job token's job does not depend on this job"
	}
	return "403 Forbidden"
}

// unavailable classifies the failures of a backend (Postgres or Redis down, restarting,
// full, timing out) that a client should simply retry: gitlab-runner retries 503s by
// itself. The stores mark theirs builds.ErrUnavailable; the rest are failures of a
// connection that any backend (the object store too) can meet.
func unavailable(err error) bool {
	var netErr net.Error
	return errors.Is(err, builds.ErrUnavailable) ||
		errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.As(err, &netErr)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, api.Error{Message: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// decodeJSON reads one JSON value into v, rejecting trailing data; with strict, unknown
// fields too (operator definitions, where a typo should not be silently ignored).
func decodeJSON(r *http.Request, v any, strict bool) error {
	body := &bodyReader{r: r.Body}
	dec := json.NewDecoder(body)
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		if body.err != nil {
			return bodyError(body.err)
		}
		if errors.Is(err, io.EOF) {
			return badRequest("request body is empty; expected a JSON object")
		}
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return badRequest("field %q has the wrong type: expected %s", typeErr.Field, typeErr.Type)
		}
		return badRequest("malformed JSON: %s", err.Error())
	}
	if dec.More() {
		return badRequest("malformed JSON: unexpected data after the object")
	}
	if body.err != nil {
		return bodyError(body.err)
	}
	return nil
}

// bodyReader remembers the error of reading the request body, so that decodeJSON can tell
// a body that failed to arrive from one that arrived malformed.
type bodyReader struct {
	r   io.Reader
	err error
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// bodyError answers a request whose body could not be read. A body cut off mid-stream or
// not received in time is the client's failure: it must not be answered, logged or counted
// as a backend outage (503), which io.ErrUnexpectedEOF and net errors otherwise are.
func bodyError(err error) error {
	var tooBig *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &tooBig):
		return err
	case errors.As(err, &netErr) && netErr.Timeout():
		return &httpError{code: http.StatusRequestTimeout, msg: "408 Request Timeout - the request body did not arrive in time"}
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("request body ended before its declared length")
	}
	return badRequest("request body could not be read")
}

// bodyDeadline bounds the time a request's body may take to arrive. Without it a client
// trickling a body holds a connection and a goroutine for the server's whole ReadTimeout
// before any token is checked. Bodyless requests are left alone: for them net/http already
// reads the connection in the background, where a deadline would cancel the request (a
// long poll, a waiter); once a body hits EOF, net/http clears the deadline the same way.
func bodyDeadline(d time.Duration) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Body != nil && r.Body != http.NoBody {
				_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(d))
			}
			next.ServeHTTP(w, r)
		})
	}
}

func limitBody(n int64) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > n {
				writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", n))
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, n)
			next.ServeHTTP(w, r)
		})
	}
}
