// Operator API, the audit history: the handler here takes the admin token (PRIVATE-TOKEN,
// checked by requireAdmin in routes.go); actor names the operator in every event it records.

package handlers

import (
	"net/http"

	"github.com/jobapi/jobapi/api"
)

// actor names who did an operator action in the event history. There is one admin token,
// so the actor is "admin" plus the request id that links the event to the access log.
func actor(r *http.Request) string {
	return "admin (request " + RequestID(r.Context()) + ")"
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
