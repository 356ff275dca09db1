// Package httppark holds an HTTP/1.1 request without a goroutine. Its handler takes the
// connection from net/http (Park: a hijack) and returns; whoever answers later writes the
// response on the connection (Conn.Answer) and gives it back to the server through the
// Listener it serves from, so the client keeps its keep-alive connection.
//
// Why: a request net/http holds costs a goroutine whose stack keeps the deepest the handler
// went (8 to 16 KB), the connection's 4 KB read and write buffers, the response's 2 KB
// buffer, and a second goroutine that reads the connection in the background to see the
// client go. At 10,000 long-polled runners that was most of a replica's memory. A parked
// request costs its connection and what its answer needs.
//
// What is lost is that background read, which cancels a held request's context when its
// client goes away. Alive peeks at the connection instead, without blocking, so whoever
// answers can check before doing work for a client that is gone.
package httppark

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// maxUnreadBody is how much of a request's body Park still reads to its end: the rest of
// a body left on the connection would be read as the next request.
const maxUnreadBody = 64 << 10

// writeTimeout bounds an answer's write: a client that stopped reading gets its connection
// closed instead of holding the answering goroutine.
const writeTimeout = 10 * time.Second

// ErrNotParkable: the request cannot leave net/http (not HTTP/1.x, its connection cannot be
// hijacked, its body is longer than Park reads, or the listener is closed); hold it on its
// goroutine instead.
var ErrNotParkable = errors.New("request cannot be parked")

// Listener serves a net.Listener's connections and those that parked requests give back.
type Listener struct {
	net.Listener

	start    sync.Once
	accepted chan acceptResult
	back     chan net.Conn

	mu     sync.Mutex
	closed bool
	done   chan struct{} // closed by Close
	parked sync.WaitGroup
}

type acceptResult struct {
	conn net.Conn
	err  error
}

// NewListener returns a listener for http.Server.Serve whose requests may be parked.
func NewListener(l net.Listener) *Listener {
	return &Listener{Listener: l, accepted: make(chan acceptResult), back: make(chan net.Conn), done: make(chan struct{})}
}

// Accept returns the next new connection, or one a parked request's answer gave back.
func (l *Listener) Accept() (net.Conn, error) {
	l.start.Do(func() { go l.acceptLoop() })
	select {
	case c := <-l.back:
		return c, nil
	case a := <-l.accepted:
		return a.conn, a.err
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// acceptLoop accepts new connections for Accept, which also waits for given-back ones.
func (l *Listener) acceptLoop() {
	for {
		c, err := l.Listener.Accept()
		select {
		case l.accepted <- acceptResult{c, err}:
		case <-l.done:
			if c != nil {
				_ = c.Close()
			}
			return
		}
		if errors.Is(err, net.ErrClosed) {
			return
		}
	}
}

// Close stops accepting; answers given after it close their connections.
func (l *Listener) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.done)
	l.mu.Unlock()
	return l.Listener.Close()
}

// Drain waits until every parked request was answered or closed, or ctx ends.
func (l *Listener) Drain(ctx context.Context) error {
	drained := make(chan struct{})
	go func() {
		l.parked.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// giveBack hands an answered connection to Serve, which reads its next request; false when
// the listener is closed.
func (l *Listener) giveBack(c net.Conn) bool {
	select {
	case l.back <- c:
		return true
	case <-l.done:
		return false
	}
}

// Park takes r's connection from net/http, after reading what is left of r's body. The
// handler must return at once without writing to w or reading r.Body again; the request is
// answered through the Conn. Headers already set on w are not sent: copy them first.
func (l *Listener) Park(w http.ResponseWriter, r *http.Request) (*Conn, error) {
	if r.ProtoMajor != 1 {
		return nil, ErrNotParkable
	}
	if r.Body != nil && r.Body != http.NoBody {
		n, err := io.Copy(io.Discard, io.LimitReader(r.Body, maxUnreadBody+1))
		if err != nil || n > maxUnreadBody {
			return nil, ErrNotParkable
		}
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, ErrNotParkable
	}
	l.parked.Add(1)
	l.mu.Unlock()
	c, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		l.parked.Done()
		return nil, fmt.Errorf("%w: %w", ErrNotParkable, err)
	}
	p := &Conn{l: l, conn: c, keepAlive: r.ProtoAtLeast(1, 1) && !r.Close}
	if n := rw.Reader.Buffered(); n > 0 {
		// The client sent its next request already (pipelining): it is read first once the
		// connection is back.
		b, _ := rw.Reader.Peek(n)
		p.unread = bytes.Clone(b)
	}
	return p, nil
}

// Conn is a parked request's connection. Answer or Close it exactly once.
type Conn struct {
	l         *Listener
	conn      net.Conn
	unread    []byte
	keepAlive bool
}

// Alive reports whether the client still waits: its connection has neither been closed nor
// reset. It never blocks.
func (c *Conn) Alive() bool {
	if len(c.unread) > 0 {
		return true
	}
	return alive(c.conn)
}

// Answer writes resp on the connection and gives the connection back to the server, or
// closes it when the request asked for that, the listener is closed or the write failed.
func (c *Conn) Answer(resp *Response) error {
	defer c.l.parked.Done()
	keep := c.keepAlive
	c.l.mu.Lock()
	keep = keep && !c.l.closed
	c.l.mu.Unlock()

	var b bytes.Buffer
	code := resp.Status()
	fmt.Fprintf(&b, "HTTP/1.1 %03d %s\r\n", code, http.StatusText(code))
	h := resp.header
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	body := resp.body.Bytes()
	if bodyAllowed(code) {
		h.Set("Content-Length", strconv.Itoa(len(body)))
	} else {
		h.Del("Content-Length")
		body = nil
	}
	if !keep {
		h.Set("Connection", "close")
	}
	if err := h.Write(&b); err != nil {
		_ = c.conn.Close()
		return err
	}
	b.WriteString("\r\n")
	b.Write(body)

	_ = c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.conn.Write(b.Bytes()); err != nil {
		_ = c.conn.Close()
		return err
	}
	if !keep {
		return c.conn.Close()
	}
	_ = c.conn.SetDeadline(time.Time{})
	var next net.Conn = c.conn
	if len(c.unread) > 0 {
		next = &prefixedConn{Conn: c.conn, prefix: c.unread}
	}
	if !c.l.giveBack(next) {
		return c.conn.Close()
	}
	return nil
}

// Close closes the connection without an answer (its client is gone).
func (c *Conn) Close() error {
	defer c.l.parked.Done()
	return c.conn.Close()
}

// bodyAllowed mirrors net/http: 1xx, 204 and 304 answers carry no body.
func bodyAllowed(code int) bool {
	return !(code >= 100 && code <= 199) && code != http.StatusNoContent && code != http.StatusNotModified
}

// prefixedConn reads the bytes a parked request's client sent ahead before the connection's.
type prefixedConn struct {
	net.Conn
	prefix []byte
}

func (p *prefixedConn) Read(b []byte) (int, error) {
	if len(p.prefix) > 0 {
		n := copy(b, p.prefix)
		p.prefix = p.prefix[n:]
		return n, nil
	}
	return p.Conn.Read(b)
}

// Response collects an answer the way a handler writes one (http.ResponseWriter), for
// Conn.Answer.
type Response struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

// NewResponse returns a response whose headers start as header (kept, not copied).
func NewResponse(header http.Header) *Response {
	if header == nil {
		header = http.Header{}
	}
	return &Response{header: header}
}

// Header returns the headers the answer will carry.
func (r *Response) Header() http.Header { return r.header }

// WriteHeader sets the status; the first one counts, as in net/http.
func (r *Response) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
}

// Write appends to the body; a body without a status is a 200.
func (r *Response) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(b)
}

// Status is the answer's status (200 when none was written).
func (r *Response) Status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}
