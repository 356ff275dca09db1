// Operator API, the audit history: administrators only (requireAdmin in routes.go); actor
// names the caller in every event the operator API records.

package handlers

import (
	"net/http"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
)

// actor names who did an operator action in the event history: the caller authenticate
// resolved ("alice (token #7)", "admin (request 01J…)" for the admin token, with the
// request id that links the event to the access log).
func actor(r *http.Request) string {
	a, _ := builds.ActorFrom(r.Context())
	return a.String()
}

func (h *Handler) listAuditEvents(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	events, total, err := h.svc.AuditEvents(r.Context(), p)
	if err != nil {
		return err
	}
	out := make([]api.AuditEvent, len(events))
	for i, e := range events {
		out[i] = api.AuditEvent{ID: e.ID, At: e.At, Actor: e.Actor, Action: e.Action, Target: e.Target, Detail: e.Detail}
		if out[i].Detail == nil {
			out[i].Detail = map[string]any{}
		}
	}
	writePage(w, p, total, out)
	return nil
}
