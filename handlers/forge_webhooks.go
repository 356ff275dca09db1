package handlers

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pushes"
	"github.com/jobapi/jobapi/builds/tokenguard"
)

// Inbound webhooks: no token; each forge signs its request with the project's webhook
// secret (GitHub X-Hub-Signature-256, Gitea X-Gitea-Signature, GitLab X-Gitlab-Token),
// and nothing is read before the signature holds but the body itself.

func receiveURL(base string, projectID int64, forge string) string {
	return fmt.Sprintf("%s/api/v4/projects/%d/hooks/inbound/%s", base, projectID, forge)
}

func (h *Handler) receiveWebhook(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	// Past a budget of wrong signatures nothing is checked, a right signature included:
	// otherwise a guesser would still learn which guess is right.
	client := clientAddr(r)
	if budget, retry := h.webhooks.Throttled(client, id); budget != "" {
		return h.webhookThrottled(r, budget, retry)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	out, err := h.pushes.Receive(r.Context(), pushes.Webhook{ProjectID: id, Forge: chi.URLParam(r, "forge"),
		Header: r.Header.Get, Body: body})
	var sig *pushes.SignatureError
	switch {
	case errors.As(err, &sig):
		budget, retry, lerr := h.webhooks.Fail(r.Context(), client, id)
		if lerr != nil {
			// Redis down: the failure goes uncounted (fail open, as every budget does).
			h.faults.Count(r.Context(), "rate_limiter_unavailable_webhook_signature_failure", lerr)
			h.metrics.rateLimit.WithLabelValues("webhook_signature_failure", "fail_open").Inc()
		}
		if budget != "" {
			return h.webhookThrottled(r, budget, retry)
		}
		return &httpError{code: http.StatusUnauthorized, msg: "401 Unauthorized - " + sig.Msg}
	case errors.Is(err, builds.ErrNotFound):
		return &httpError{code: http.StatusNotFound, msg: "404 Not Found - " + err.Error()}
	case err != nil:
		return err
	}
	code := http.StatusOK
	switch out.Result {
	case pushes.Created:
		code = http.StatusCreated
		w.Header().Set("Location", h.externalBase(r)+"/api/v4/projects/"+strconv.FormatInt(id, 10)+"/pipelines/"+strconv.FormatInt(out.PipelineID, 10))
	case pushes.Ignored:
		code = http.StatusAccepted // as forges expect of an event the receiver does not act on
	}
	writeJSON(w, code, api.WebhookResult{Result: string(out.Result), Event: out.Event, DeliveryID: out.DeliveryID,
		PipelineID: out.PipelineID, Message: out.Message})
	return nil
}

// webhookThrottled is the 429 of a delivery past a budget of wrong signatures, counted in
// the metrics and logged once per interval rather than per request.
func (h *Handler) webhookThrottled(r *http.Request, budget string, retry time.Duration) error {
	scope := "webhook_signature_failure"
	msg := "too many wrong webhook signatures from this address"
	if budget == tokenguard.WebhookPerProject {
		scope += "_project"
		msg = "too many wrong webhook signatures for this project"
	}
	h.metrics.rateLimit.WithLabelValues(scope, "limited").Inc()
	h.webhookRefusals.Count(r.Context(), scope, nil)
	return &httpError{code: http.StatusTooManyRequests, msg: "429 Too Many Requests - " + msg + "; retry later",
		header: http.Header{"Retry-After": {strconv.Itoa(max(int(retry.Seconds()+0.999), 1))}}}
}

// needPushes answers 501 where the server was built without the push service (handler
// tests that leave it out).
func (h *Handler) needPushes(fn func(http.ResponseWriter, *http.Request) error) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		if h.pushes == nil {
			return &httpError{code: http.StatusNotImplemented, msg: "501 Not Implemented - this server receives no pushes"}
		}
		return fn(w, r)
	}
}
