package httppark_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/httppark"
)

// server serves on a parking listener: requests to /park are parked and sent to the test
// (with their X-Test header kept for the answer), the others answered at once.
type server struct {
	url    string
	ln     *httppark.Listener
	srv    *http.Server
	parked chan parked
}

type parked struct {
	conn   *httppark.Conn
	header http.Header
}

func start(t *testing.T) *server {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{url: "http://" + inner.Addr().String(), ln: httppark.NewListener(inner), parked: make(chan parked, 16)}
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/park" {
			body, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Echo", string(body))
			_, _ = io.WriteString(w, "direct")
			return
		}
		w.Header().Set("X-Test", "kept")
		h := w.Header().Clone()
		c, err := s.ln.Park(w, r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		s.parked <- parked{c, h}
	})}
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()
	t.Cleanup(func() {
		_ = s.srv.Close()
		if err := <-served; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return s
}

func (s *server) next(t *testing.T) parked {
	t.Helper()
	select {
	case p := <-s.parked:
		return p
	case <-time.After(5 * time.Second):
		t.Fatal("no request was parked")
		return parked{}
	}
}

func answer(t *testing.T, p parked, code int, body string) {
	t.Helper()
	resp := httppark.NewResponse(p.header)
	resp.Header().Set("Content-Type", "text/plain")
	resp.WriteHeader(code)
	_, _ = io.WriteString(resp, body)
	if err := p.conn.Answer(resp); err != nil {
		t.Fatalf("Answer: %v", err)
	}
}

// A parked request is answered from another goroutine, with the headers set before it was
// parked and its body; the client's next request, with a body the handler never read, goes
// over the same connection, which the server serves again.
func TestParkedAnswerKeepsTheConnection(t *testing.T) {
	s := start(t)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	var reused []bool
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { reused = append(reused, i.Reused) }}
	do := func(path, body string) *http.Response {
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "POST", s.url+path, strings.NewReader(body))
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	go func() { answer(t, s.next(t), http.StatusCreated, `{"id":1}`) }()
	resp := do("/park", `{"token":"unread by the handler"}`)
	got, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || string(got) != `{"id":1}` || resp.Header.Get("X-Test") != "kept" {
		t.Fatalf("parked answer: %d %q X-Test=%q", resp.StatusCode, got, resp.Header.Get("X-Test"))
	}
	if resp.ContentLength != int64(len(got)) || resp.Header.Get("Date") == "" {
		t.Errorf("Content-Length %d, Date %q", resp.ContentLength, resp.Header.Get("Date"))
	}

	resp = do("/direct", "second")
	got, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if string(got) != "direct" || resp.Header.Get("X-Echo") != "second" {
		t.Fatalf("next request on the connection: %q, echo %q", got, resp.Header.Get("X-Echo"))
	}
	// And a second park on the given-back connection.
	go func() { answer(t, s.next(t), http.StatusNoContent, "") }()
	resp = do("/park", "")
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("second parked answer: %d", resp.StatusCode)
	}
	if len(reused) != 3 || reused[1] != true || reused[2] != true {
		t.Fatalf("connections reused: %v, want [false true true]", reused)
	}
}

// A 204 carries no Content-Length and no body (RFC 9110), whatever the handler wrote.
func TestParkedNoContentHasNoLength(t *testing.T) {
	s := start(t)
	conn, br := dial(t, s)
	write(t, conn, "POST /park HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	answer(t, s.next(t), http.StatusNoContent, "ignored")
	resp := read(t, br)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if _, ok := resp.Header["Content-Length"]; ok {
		t.Errorf("a 204 with Content-Length %q", resp.Header.Get("Content-Length"))
	}
	// Nothing follows the 204 but the next answer.
	write(t, conn, "GET /direct HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp := read(t, br); resp.StatusCode != http.StatusOK {
		t.Fatalf("next answer %d", resp.StatusCode)
	}
}

// Alive sees the client close its connection, without reading from it.
func TestAliveSeesTheClientGo(t *testing.T) {
	s := start(t)
	conn, _ := dial(t, s)
	write(t, conn, "POST /park HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	p := s.next(t)
	if !p.conn.Alive() {
		t.Fatal("Alive is false while the client waits")
	}
	if !p.conn.Alive() {
		t.Fatal("Alive changed by being asked")
	}
	_ = conn.Close()
	deadline := time.Now().Add(5 * time.Second)
	for p.conn.Alive() {
		if time.Now().After(deadline) {
			t.Fatal("Alive still true 5 s after the client closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = p.conn.Close()
}

// A client that sent its next request before the answer (pipelining) gets both answers in
// order: the bytes read ahead are served once the connection is back.
func TestPipelinedRequestServedAfterTheAnswer(t *testing.T) {
	s := start(t)
	conn, br := dial(t, s)
	write(t, conn, "POST /park HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"+
		"POST /direct HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nnext")
	p := s.next(t)
	if !p.conn.Alive() {
		t.Fatal("a client with a request read ahead is not alive")
	}
	answer(t, p, http.StatusCreated, "first")
	if resp := read(t, br); resp.StatusCode != http.StatusCreated {
		t.Fatalf("first answer %d", resp.StatusCode)
	}
	resp := read(t, br)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Echo") != "next" {
		t.Fatalf("pipelined answer %d, echo %q", resp.StatusCode, resp.Header.Get("X-Echo"))
	}
}

// A request that asks for its connection to be closed gets "Connection: close" and EOF.
func TestConnectionCloseHonoured(t *testing.T) {
	s := start(t)
	conn, br := dial(t, s)
	write(t, conn, "POST /park HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
	answer(t, s.next(t), http.StatusOK, "bye")
	resp := read(t, br)
	if !resp.Close {
		t.Error("no Connection: close in the answer")
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the answer: %v, want EOF", err)
	}
}

// Once the server shuts down, answers close their connections and Drain returns once
// every parked request was answered.
func TestShutdownClosesAnsweredConnections(t *testing.T) {
	s := start(t)
	conn, br := dial(t, s)
	write(t, conn, "POST /park HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
	p := s.next(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	short, shortCancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer shortCancel()
	if err := s.ln.Drain(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with a request parked: %v", err)
	}
	answer(t, p, http.StatusNoContent, "")
	if resp := read(t, br); resp.StatusCode != http.StatusNoContent || !resp.Close {
		t.Fatalf("answer after shutdown: %d, close %v", resp.StatusCode, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after the answer: %v, want EOF", err)
	}
	if err := s.ln.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

func dial(t *testing.T, s *server) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return conn, bufio.NewReader(conn)
}

func write(t *testing.T, conn net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(conn, s); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, br *bufio.Reader) *http.Response {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp
}
