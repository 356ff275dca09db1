// Operator API, job logs: a member's personal access token, or an administrator's (or the admin
// token), in PRIVATE-TOKEN or Authorization: Bearer; each route's action (h.can in routes.go)
// decides by the caller's role (builds/access). The runner's PATCH is in runner_trace.go.

package handlers

import (
	"encoding/hex"
	"net/http"
	"strings"
	"time"
)

func (h *Handler) getTrace(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := h.jobIDs(r)
	if err != nil {
		return err
	}
	trace, err := h.logs.OpenTrace(r.Context(), pid, id)
	if err != nil {
		return err
	}
	defer trace.Close()
	if h.traceWatch != nil && trace.Archive == nil {
		// Someone is reading a live log: ask the runner for updates every few seconds.
		if err := h.traceWatch.Watch(r.Context(), id); err != nil {
			h.log.DebugContext(r.Context(), "trace watch not recorded", "error", err)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-cache")
	var modified time.Time
	if trace.Archive != nil {
		// An archived log never changes: its SHA-256 is a strong validator (If-None-Match,
		// If-Range). A live log has none, so a Range is always served from what it holds now.
		w.Header().Set("ETag", `"`+hex.EncodeToString(trace.Archive.SHA256)+`"`)
		modified = trace.Archive.CreatedAt
	}
	if rng := r.Header.Get("Range"); rng != "" && !strings.HasPrefix(rng, "bytes=") {
		// A unit other than bytes is ignored (RFC 9110 §14.2), not refused as net/http does.
		r.Header.Del("Range")
	}
	// Ranges (bytes=N-, N-M, -N) answer 206 with Content-Range; a start past the end is a
	// 416 with Content-Range: bytes */size, which a tail reads as "nothing new yet"; a
	// malformed range (bytes=9-3) is a 416.
	http.ServeContent(w, r, "", modified, trace)
	return nil
}
