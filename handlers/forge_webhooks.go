package handlers

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/pushes"
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
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return bodyError(err)
	}
	out, err := h.pushes.Receive(r.Context(), pushes.Webhook{ProjectID: id, Forge: chi.URLParam(r, "forge"),
		Header: r.Header.Get, Body: body})
	var sig *pushes.SignatureError
	switch {
	case errors.As(err, &sig):
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
