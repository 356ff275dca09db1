package handlers

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/jobapi/jobapi/builds"
)

// RateLimiter counts requests per key across replicas (ratelimit.Limiter over Redis).
type RateLimiter interface {
	Allow(ctx context.Context, scope, key string, requests int, window time.Duration) (RateDecision, error)
}

// RateDecision is a limiter's answer for one request.
type RateDecision struct {
	Allowed   bool
	Limit     int
	Remaining int
	// Reset is when the window ends; RetryAfter the time until then, by the limiter's clock
	// (which names the windows).
	Reset      time.Time
	RetryAfter time.Duration
}

// RateLimits are requests per minute; 0 turns a limit off.
type RateLimits struct {
	// JobsRequest: per runner token on POST /jobs/request (GitLab's spirit: 2,000/min).
	JobsRequest int
	// JobUpdates: per job on PUT /jobs/:id and, separately, on PATCH /jobs/:id/trace (200/min),
	// counted only for requests that carry the job's token.
	JobUpdates int
	// JobTokenFailures: per client address, PUTs and trace PATCHes whose job token is wrong.
	JobTokenFailures int
	// RunnerVerify: per runner token on POST /runners/verify, which writes a manager row.
	RunnerVerify int
}

// rateLimitError is the 429 answer; gitlab-runner retries it (5 tries) honouring Retry-After and
// RateLimit-ResetTime. Load is never answered with 403: three 403s make a runner stop
// polling for an hour.
type rateLimitError struct{ d RateDecision }

func (e *rateLimitError) Error() string { return "429 Too Many Requests" }

// limit applies one budget. A limiter error (Redis down or slow) lets the request through:
// failing closed would stop the whole fleet because of a cache. It is counted (the
// fail_open metric, and the log's summary once per interval), not logged per request.
func (h *Handler) limit(r *http.Request, scope, key string, perMinute int) error {
	if h.limiter == nil || perMinute <= 0 {
		return nil
	}
	d, err := h.limiter.Allow(r.Context(), scope, key, perMinute, time.Minute)
	if err != nil {
		h.faults.Count(r.Context(), "rate_limiter_unavailable_"+scope, err)
		h.metrics.rateLimit.WithLabelValues(scope, "fail_open").Inc()
		return nil
	}
	if d.Allowed {
		return nil
	}
	h.metrics.rateLimit.WithLabelValues(scope, "limited").Inc()
	return &rateLimitError{d: d}
}

// limitJob applies the per-job budget of a PUT or trace PATCH (scope) to requests with the
// job's own token only. Anyone can guess a job id: were bogus tokens counted there, a few
// hundred of them would lock the real runner out of its job (429 on its ack, trace and final
// update). They are counted per client address instead, in a bucket of their own, and
// answered 403 (429 past that budget) without reaching the service. A PUT has the service
// apply the same budgets (admitJob), as its ack checks the token itself.
func (h *Handler) limitJob(r *http.Request, scope string, id int64, token string) error {
	if !h.jobLimited() {
		return nil // the service checks the token as part of the update
	}
	ok, err := h.svc.JobTokenValid(r.Context(), id, token)
	if err != nil {
		return err
	}
	if err := h.admitJob(r, scope, id)(r.Context(), ok); err != nil {
		return err
	}
	if !ok {
		return &builds.JobForbiddenError{Cause: builds.InvalidJobToken}
	}
	return nil
}

// admitJob applies limitJob's budgets once the token's check is known: a wrong token
// spends its client's failure budget, a right one its job's. A PUT hands it to the service
// (builds.JobUpdate.Admit), whose ack is the token check itself: a cold ack is then one
// statement instead of a read of the build and its project before it.
func (h *Handler) admitJob(r *http.Request, scope string, id int64) func(ctx context.Context, valid bool) error {
	return func(_ context.Context, valid bool) error {
		if !valid {
			return h.limit(r, "job_token_failure", clientAddr(r), h.limits.JobTokenFailures)
		}
		return h.limit(r, scope, strconv.FormatInt(id, 10), h.limits.JobUpdates)
	}
}

// jobLimited reports whether limitJob's budgets apply at all.
func (h *Handler) jobLimited() bool {
	return h.limiter != nil && (h.limits.JobUpdates > 0 || h.limits.JobTokenFailures > 0)
}

// clientAddr is the peer's IP address. Behind a load balancer that is the balancer's, so
// all clients share one failure bucket there: legitimate runners rarely fail a token check.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func writeRateLimited(w http.ResponseWriter, d RateDecision) {
	retry := max(int(d.RetryAfter.Seconds()+0.999), 1)
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	w.Header().Set("RateLimit-Limit", strconv.Itoa(d.Limit))
	w.Header().Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
	w.Header().Set("RateLimit-Reset", strconv.Itoa(retry))
	w.Header().Set("RateLimit-ResetTime", d.Reset.UTC().Format(http.TimeFormat))
	writeError(w, http.StatusTooManyRequests, "429 Too Many Requests - retry later")
}
