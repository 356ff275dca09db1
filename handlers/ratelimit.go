package handlers

import (
	"context"
	"net/http"
	"strconv"
	"time"
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
	Reset     time.Time
}

// RateLimits are requests per minute; 0 turns a limit off.
type RateLimits struct {
	// JobsRequest: per runner token on POST /jobs/request (GitLab's spirit: 2,000/min).
	JobsRequest int
	// JobUpdates: per job on PUT /jobs/:id and, separately, on PATCH /jobs/:id/trace (200/min).
	JobUpdates int
}

// rateLimitError is the 429 answer; gitlab-runner retries it (5 tries) honouring Retry-After and
// RateLimit-ResetTime. Load is never answered with 403: three 403s make a runner stop
// polling for an hour.
type rateLimitError struct{ d RateDecision }

func (e *rateLimitError) Error() string { return "429 Too Many Requests" }

// limit applies one budget. A limiter error (Redis down) lets the request through: failing
// closed would stop the whole fleet because of a cache.
func (h *Handler) limit(r *http.Request, scope, key string, perMinute int) error {
	if h.limiter == nil || perMinute <= 0 {
		return nil
	}
	d, err := h.limiter.Allow(r.Context(), scope, key, perMinute, time.Minute)
	if err != nil {
		h.log.WarnContext(r.Context(), "rate limiter unavailable; letting the request through", "scope", scope, "error", err)
		h.metrics.rateLimit.WithLabelValues(scope, "fail_open").Inc()
		return nil
	}
	if d.Allowed {
		return nil
	}
	h.metrics.rateLimit.WithLabelValues(scope, "limited").Inc()
	return &rateLimitError{d: d}
}

func writeRateLimited(w http.ResponseWriter, d RateDecision, now time.Time) {
	retry := max(int(d.Reset.Sub(now).Seconds()+0.999), 1)
	w.Header().Set("Retry-After", strconv.Itoa(retry))
	w.Header().Set("RateLimit-Limit", strconv.Itoa(d.Limit))
	w.Header().Set("RateLimit-Remaining", strconv.Itoa(d.Remaining))
	w.Header().Set("RateLimit-Reset", strconv.Itoa(retry))
	w.Header().Set("RateLimit-ResetTime", d.Reset.UTC().Format(http.TimeFormat))
	writeError(w, http.StatusTooManyRequests, "429 Too Many Requests - retry later")
}
