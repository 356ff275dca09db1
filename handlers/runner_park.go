// A job request the long poll holds without its goroutine (httppark): the service calls
// Detach once it knows the request will be held, and Finish when it has the answer.

package handlers

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/httppark"
)

// statusClientGone is what the metrics count for a parked request whose client left
// before its answer (nginx's 499): nothing was written.
const statusClientGone = 499

// parkedRequest is a job request on its way to being parked, then parked. It keeps only
// what its answer needs: not the http.Request nor the ResponseWriter, which would keep
// the connection's net/http buffers alive.
type parkedRequest struct {
	h      *Handler
	signer IDTokenSigner
	// Until Detach: the request being served.
	w http.ResponseWriter
	r *http.Request
	// From Detach on.
	conn   *httppark.Conn
	st     *requestState
	route  string
	header http.Header   // the headers set before it was parked (X-Request-Id)
	answer *http.Request // what writeAssigned and fail read: host, TLS, headers, context
}

func (h *Handler) newParkedRequest(w http.ResponseWriter, r *http.Request, signer IDTokenSigner) *parkedRequest {
	return &parkedRequest{h: h, signer: signer, w: w, r: r}
}

// Detach parks the request: false when it cannot be (HTTP/2, a body too long), and then
// the service holds it on its goroutine.
func (p *parkedRequest) Detach() bool {
	w, r := p.w, p.r
	st := stateOf(r.Context())
	if st == nil {
		return false
	}
	route := chi.RouteContext(r.Context()).RoutePattern()
	header := w.Header().Clone()
	conn, err := p.h.parking.Park(w, r)
	if err != nil {
		p.h.log.DebugContext(r.Context(), "job request held on its goroutine", "error", err)
		return false
	}
	st.detached = true
	// A context of its own: the request's ends with its handler, and carries chi's route
	// context, which goes back to chi's pool then.
	ctx := context.WithValue(context.Background(), requestIDKey, st)
	answer := &http.Request{Method: r.Method, URL: r.URL, Proto: r.Proto, ProtoMajor: r.ProtoMajor,
		ProtoMinor: r.ProtoMinor, Header: r.Header, Host: r.Host, RemoteAddr: r.RemoteAddr, TLS: r.TLS}
	*p = parkedRequest{h: p.h, signer: p.signer, conn: conn, st: st, route: route, header: header,
		answer: answer.WithContext(ctx)}
	return true
}

func (p *parkedRequest) Context() context.Context { return p.answer.Context() }

func (p *parkedRequest) Alive() bool { return p.conn.Alive() }

// Finish answers the parked request as the handler would have, then counts and logs it.
func (p *parkedRequest) Finish(a *builds.Assignment, err error) {
	h, r := p.h, p.answer
	ctx := r.Context()
	h.metrics.jobRequests.WithLabelValues(jobRequestResult(err)).Inc()
	if errors.Is(err, context.Canceled) {
		_ = p.conn.Close()
		h.log.DebugContext(ctx, "client gone", "error", err)
		h.observed(ctx, p.st.start, p.route, r.Method, statusClientGone, p.header)
		return
	}
	resp, ok := p.answerFor(a, err)
	if !ok {
		_ = p.conn.Close()
		h.observed(ctx, p.st.start, p.route, r.Method, http.StatusInternalServerError, p.header)
		return
	}
	if werr := p.conn.Answer(resp); werr != nil {
		h.log.DebugContext(ctx, "answer to a parked job request not written", "error", werr)
	}
	h.observed(ctx, p.st.start, p.route, r.Method, resp.Status(), resp.Header())
}

// answerFor writes the answer the handler would have written; false when that panicked
// (logged: no middleware recovers on this goroutine), and the connection is then closed.
func (p *parkedRequest) answerFor(a *builds.Assignment, err error) (resp *httppark.Response, ok bool) {
	defer func() {
		if v := recover(); v != nil {
			p.h.log.ErrorContext(p.answer.Context(), "panic answering a held job request", "panic", v, "stack", string(debug.Stack()))
			ok = false
		}
	}()
	resp = httppark.NewResponse(p.header)
	if err == nil {
		err = p.h.writeAssigned(resp, p.answer, a, p.signer)
	}
	if err != nil {
		p.h.fail(resp, p.answer, err)
	}
	return resp, true
}
