package handlers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jobapi/jobapi/builds/tokenguard"
)

type ctxKey int

const requestIDKey ctxKey = iota

// requestState is what the middleware knows of a request being served, in its context.
type requestState struct {
	id    string
	start time.Time
	// detached: the handler parked the request (runner_park.go), which is answered and
	// observed later, off the handler's goroutine.
	detached bool
}

func stateOf(ctx context.Context) *requestState {
	st, _ := ctx.Value(requestIDKey).(*requestState)
	return st
}

// validRequestID: what an X-Request-Id may be to be kept and logged.
func validRequestID(id string) bool {
	return len(id) >= 1 && len(id) <= 64 && onlyBytes(id, "._-")
}

// RequestID returns the id of the request being served ("" outside a request).
func RequestID(ctx context.Context) string {
	if st := stateOf(ctx); st != nil {
		return st.id
	}
	return ""
}

// requestID keeps the runner's X-Request-Id (gitlab-runner sends 32 hex) or makes one, and
// echoes it, so a runner log line and a server log line can be matched.
func (h *Handler) requestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			id = hex.EncodeToString(b)
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, &requestState{id: id})))
	})
}

func (h *Handler) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				h.log.ErrorContext(r.Context(), "panic serving request", "panic", v, "path", r.URL.Path)
				writeError(w, http.StatusInternalServerError, "500 Internal Server Error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

type httpMetrics struct {
	requests    *prometheus.CounterVec
	duration    *prometheus.HistogramVec
	jobRequests *prometheus.CounterVec
	rateLimit   *prometheus.CounterVec
}

func newHTTPMetrics(reg *prometheus.Registry) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jobapi_http_requests_total", Help: "HTTP requests by route pattern, method and status.",
		}, []string{"route", "method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jobapi_http_request_duration_seconds", Help: "HTTP request latency by route pattern.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 10, 60},
		}, []string{"route", "method"}),
	}
	m.jobRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobapi_job_requests_total", Help: "POST /jobs/request by result.",
	}, []string{"result"})
	m.rateLimit = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "jobapi_rate_limit_total", Help: "Rate-limit decisions that did not simply allow: limited (429) or fail_open (limiter down).",
	}, []string{"scope", "outcome"})
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.jobRequests, m.rateLimit)
	}
	return m
}

// observe logs one JSON line per request and counts it by route pattern (bounded
// cardinality: never the job id). Headers and bodies are never logged: they carry tokens.
func (h *Handler) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateOf(r.Context())
		if st == nil {
			st = &requestState{}
		}
		st.start = time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if st.detached {
			return // its parkedRequest observes it once answered
		}
		route := chi.RouteContext(r.Context()).RoutePattern()
		if route == "" {
			route = "unmatched"
		}
		h.observed(r.Context(), st.start, route, r.Method, rec.status, w.Header())
	})
}

// observed counts and logs a request that was answered with status and header.
func (h *Handler) observed(ctx context.Context, start time.Time, route, method string, status int, header http.Header) {
	if status == 0 {
		status = http.StatusOK
	}
	elapsed := time.Since(start)
	h.metrics.requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	h.metrics.duration.WithLabelValues(route, method).Observe(elapsed.Seconds())
	level := slog.LevelInfo
	if status == http.StatusServiceUnavailable && header.Get("Retry-After") != "" {
		// Shed or a backend not answering: an answer given on purpose, which the
		// runner retries; the fault tallies say what, once per interval, where a line
		// per request would flood the log of an overloaded replica.
		level = slog.LevelDebug
	} else if status >= 500 {
		level = slog.LevelError
	} else if route == "/api/v4/jobs/request" && (status == http.StatusNoContent || status == statusClientGone) {
		level = slog.LevelDebug // idle polls would drown everything else
	}
	if h.log.Enabled(ctx, level) { // spares boxing the attributes of a line not written
		h.log.Log(ctx, level, "request", "request_id", RequestID(ctx), "method", method,
			"route", route, "status", status, "duration_ms", float64(elapsed.Microseconds())/1000)
	}
}

// isAdmin reports whether the request carries the admin token (a guess counts as a failure).
func (h *Handler) isAdmin(r *http.Request) bool {
	token := credential(r)
	if token == "" {
		return false
	}
	check, _ := h.admin.Check(r.Context(), clientAddr(r), token)
	return check == tokenguard.AdminOK
}

func (h *Handler) liveness(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (h *Handler) readiness(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	r = r.WithContext(ctx)
	var err error
	if h.health != nil {
		err = h.health.Ready(r)
	} else {
		err = h.svc.Ready(ctx)
	}
	if err != nil {
		h.log.WarnContext(ctx, "not ready", "error", err)
		w.Header().Set("Retry-After", "1")
		body := map[string]string{"status": "unavailable"}
		// Driver errors name hosts, users and databases: only the operator sees them.
		if h.isAdmin(r) {
			body["message"] = err.Error()
		}
		writeJSON(w, http.StatusServiceUnavailable, body)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}
