package handlers

import (
	"net/http"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/pushes"
)

// Push settings of a project: PRIVATE-TOKEN (admin). The secret is written, never read.

func (h *Handler) getPushSettings(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	st, err := h.pushes.Settings(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.pushSettingsView(r, st))
	return nil
}

func (h *Handler) updatePushSettings(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	var req api.PushSettingsChange
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	c := pushes.Change{WebhookSecret: req.WebhookSecret}
	if req.PollInterval != nil {
		n, err := req.PollInterval.Int64()
		if err != nil || n < 0 || n > int64(pushes.MaxPollInterval.Seconds()) {
			return badRequest("poll_interval must be 0 (off) or between %d and %d seconds",
				int(pushes.MinPollInterval.Seconds()), int(pushes.MaxPollInterval.Seconds()))
		}
		d := time.Duration(n) * time.Second
		c.PollInterval = &d
	}
	st, err := h.pushes.UpdateSettings(r.Context(), id, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, h.pushSettingsView(r, st))
	return nil
}

// pollProject polls the project's remote now, whether polling is on or not: what a
// forge-less setup calls from a git hook (post-receive) to skip the wait.
func (h *Handler) pollProject(w http.ResponseWriter, r *http.Request) error {
	id, err := projectID(r)
	if err != nil {
		return err
	}
	c, err := h.pushes.PollProject(r.Context(), id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.PollResult{Polled: c.Polled, Failed: c.Failed, Recorded: c.Recorded, Started: c.Started})
	return nil
}

func (h *Handler) pushSettingsView(r *http.Request, st pushes.Settings) api.PushSettings {
	out := api.PushSettings{WebhookSecretSet: st.WebhookSecret != "", PollInterval: int64(st.PollInterval.Seconds()),
		PolledAt: st.PolledAt, PollError: st.PollError, UpdatedAt: st.UpdatedAt, ReceiveURLs: map[string]string{}}
	for _, f := range pushes.Forges {
		out.ReceiveURLs[f] = receiveURL(h.externalBase(r), st.ProjectID, f)
	}
	return out
}
