// Operator API, the audit history: administrators only (access.ReadInstance, h.can in
// routes.go). Every event names its actor (builds.ActorFrom), put in the request's context
// when the caller is authenticated.

package handlers

import (
	"net/http"

	"github.com/jobapi/jobapi/api"
)

func (h *Handler) listAuditEvents(w http.ResponseWriter, r *http.Request) error {
	p, err := pageOf(r)
	if err != nil {
		return err
	}
	events, total, err := h.audit.Events(r.Context(), p)
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
