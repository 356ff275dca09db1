package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jobapi/jobapi/builds/forgestatus"
	"github.com/jobapi/jobapi/periodic"
)

// Sending settings (the defaults are GitLab's webhook timeout and a backoff that gives a
// receiver an hour and a half over 8 attempts).
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMaxAttempts = 8
	DefaultBackoff     = 10 * time.Second
	maxBackoff         = time.Hour
	// leaseMargin: a claimed delivery is due again this long after its request's timeout,
	// should the worker that holds it die.
	leaseMargin = 30 * time.Second
	// sendBatch deliveries are claimed at once, sent by up to sendParallel requests.
	sendBatch    = 16
	sendParallel = 8
	// maxResponseBody of an answer is kept in the log.
	maxResponseBody = 4 << 10
	// keepFinished: delivered and given-up deliveries are kept this long for the log.
	keepFinished = 30 * 24 * time.Hour
)

// Sender sends deliveries: webhooks over HTTP, commit statuses through the forge clients.
type Sender struct {
	Outbox      Outbox
	Site        Site
	Timeout     time.Duration
	MaxAttempts int
	Backoff     time.Duration
	// DisableBackoff is how long a hook is disabled after its DisableAfter-th failure in a
	// row; it doubles after each further one (see disable.go).
	DisableBackoff time.Duration
	// AllowLocal lets requests reach the local network (see netguard.go).
	AllowLocal bool
	Now        func() time.Time
	Log        *slog.Logger

	once             sync.Once
	verified, unsafe *http.Client
}

func (s *Sender) init() {
	s.once.Do(func() {
		if s.Timeout <= 0 {
			s.Timeout = DefaultTimeout
		}
		if s.MaxAttempts <= 0 {
			s.MaxAttempts = DefaultMaxAttempts
		}
		if s.Backoff <= 0 {
			s.Backoff = DefaultBackoff
		}
		if s.DisableBackoff <= 0 {
			s.DisableBackoff = DefaultDisableBackoff
		}
		if s.Log == nil {
			s.Log = slog.New(slog.DiscardHandler)
		}
		s.verified = NewClient(s.Timeout, s.AllowLocal, false)
		s.unsafe = NewClient(s.Timeout, s.AllowLocal, true)
	})
}

func (s *Sender) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// backoff is the wait after a delivery's attempt-th failure: Backoff, doubled each time.
func (s *Sender) backoff(attempt int) time.Duration {
	d := s.Backoff
	for i := 1; i < attempt && d < maxBackoff; i++ {
		d *= 2
	}
	return min(d, maxBackoff)
}

// SendOnce claims the due deliveries and sends them, batch after batch while batches are
// full; it returns how many it sent.
func (s *Sender) SendOnce(ctx context.Context) (int, error) {
	s.init()
	sent := 0
	for ctx.Err() == nil {
		claimed, err := s.Outbox.ClaimHookDeliveries(ctx, s.now(), s.Timeout+leaseMargin, sendBatch)
		if err != nil {
			return sent, err
		}
		var wg sync.WaitGroup
		sem := make(chan struct{}, sendParallel)
		errs := make([]error, len(claimed))
		for i, c := range claimed {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				_, errs[i] = s.deliver(ctx, c, false)
			}()
		}
		wg.Wait()
		sent += len(claimed)
		if err := errors.Join(errs...); err != nil {
			return sent, err
		}
		if len(claimed) < sendBatch {
			return sent, nil
		}
	}
	return sent, nil
}

// deliver makes one attempt of c and records it; once: no retry (a test delivery). The
// error is the store's: a failed request is a logged attempt, not an error.
func (s *Sender) deliver(ctx context.Context, c Claimed, once bool) (Attempt, error) {
	s.init()
	// Outcomes are recorded even when ctx ended (a replica stopping): the request was made.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if c.Hook != nil && !once {
		if status, until := c.Hook.Alert(s.now()); status != AlertExecutable {
			return s.skip(rctx, c, status, until)
		}
	}
	a, token := s.attempt(ctx, c)
	ok := a.StatusCode >= 200 && a.StatusCode <= 299
	if c.Hook != nil && (ok || !once) {
		// A test delivery that succeeds re-enables the hook; one that fails does not count,
		// as the operator is trying the receiver out.
		if err := s.Outbox.RecordHookResult(rctx, c.Hook.ID, ok, s.now(), func(failures int) time.Duration {
			return disableBackoff(s.DisableBackoff, failures)
		}); err != nil {
			return a, err
		}
	}
	state, next := StateDelivered, s.now()
	if !ok {
		switch {
		case once || c.Attempts >= s.MaxAttempts:
			state = StateFailed
		default:
			state, next = StatePending, s.now().Add(s.backoff(c.Attempts))
		}
		s.Log.WarnContext(ctx, "webhook delivery failed", "delivery_id", c.ID, "project_id", c.ProjectID, "hook_id", c.HookID,
			"event", c.Event, "attempt", c.Attempts, "status_code", a.StatusCode, "error", forgestatus.Mask(a.Error, token),
			"state", state, "next_attempt_at", next)
	}
	return a, s.Outbox.RecordHookAttempt(rctx, a, state, next)
}

// skip gives up a delivery of a disabled hook without a request: GitLab does not send a
// disabled hook's events, and keeping them would flood the receiver when it comes back. The
// log shows the attempt that was not made and why.
func (s *Sender) skip(ctx context.Context, c Claimed, status string, until *time.Time) (Attempt, error) {
	now := s.now()
	a := Attempt{DeliveryID: c.ID, Attempt: c.Attempts, URL: c.Hook.URL, StartedAt: now,
		Error: "not sent: the hook is " + strings.ReplaceAll(status, "_", " ")}
	if until != nil {
		a.Error += " until " + until.UTC().Format(time.RFC3339)
	}
	a.Error += fmt.Sprintf(" after %d failed deliveries in a row", c.Hook.RecentFailures)
	s.Log.InfoContext(ctx, "webhook delivery dropped: the hook is disabled", "delivery_id", c.ID, "project_id", c.ProjectID,
		"hook_id", c.HookID, "event", c.Event, "alert_status", status)
	return a, s.Outbox.RecordHookAttempt(ctx, a, StateFailed, now)
}

func decodeStatus(raw []byte) (forgestatus.Status, error) {
	var st forgestatus.Status
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("commit status payload: %w", err)
	}
	return st, nil
}

// attempt sends c once and describes what happened; token is the secret to mask.
func (s *Sender) attempt(ctx context.Context, c Claimed) (Attempt, string) {
	start := s.now()
	a := Attempt{DeliveryID: c.ID, Attempt: c.Attempts, StartedAt: start}
	var token string
	switch {
	case c.Hook != nil:
		token = c.Hook.Token
		a.URL = c.Hook.URL
		code, body, err := s.postHook(ctx, c)
		a.StatusCode, a.ResponseBody = code, body
		if err != nil {
			a.Error = err.Error()
		} else if code < 200 || code > 299 {
			a.Error = fmt.Sprintf("the receiver answered %d", code)
		}
	case c.Forge != nil:
		token = c.Forge.Token
		st, err := decodeStatus(c.Payload)
		if err != nil {
			a.Error = err.Error()
			break
		}
		a.URL = forgestatus.Endpoint(*c.Forge, st.SHA)
		res, err := forgestatus.Post(ctx, s.verified, *c.Forge, st)
		a.StatusCode, a.ResponseBody = res.StatusCode, res.Body
		if err != nil {
			a.Error = err.Error()
			if a.StatusCode >= 200 && a.StatusCode <= 299 {
				a.StatusCode = 0 // answered, but not as the client expects
			}
		}
	default:
		a.Error = "the delivery's target is gone"
	}
	a.Duration = s.now().Sub(start)
	a.Error = forgestatus.Mask(a.Error, token)
	a.ResponseBody = forgestatus.Mask(a.ResponseBody, token)
	return a, token
}

// postHook POSTs a webhook as GitLab does: its headers, the payload as the body.
func (s *Sender) postHook(ctx context.Context, c Claimed) (int, string, error) {
	h := c.Hook
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.URL, bytes.NewReader(c.Payload))
	if err != nil {
		return 0, "", err
	}
	for k, v := range LoggedHeaders(c.Delivery) {
		req.Header.Set(k, v)
	}
	req.Header.Set("X-Gitlab-Webhook-UUID", h.UUID)
	req.Header.Set("X-Gitlab-Instance", s.Site.BaseURL)
	if h.Token != "" {
		req.Header.Set("X-Gitlab-Token", h.Token)
	}
	client := s.verified
	if !h.EnableSSLVerification {
		client = s.unsafe
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxResponseBody))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20)) // lets the connection be reused
	return resp.StatusCode, strings.ToValidUTF8(string(body), "\uFFFD"), nil
}

// Worker runs the event pass and the sender on one replica; every replica runs one.
type Worker struct {
	Events   *EventPass
	Sender   *Sender
	Interval time.Duration
	Log      *slog.Logger
}

// Run runs the event pass, the sender and the pruning of old deliveries until ctx ends.
func (w *Worker) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		_ = periodic.Run(ctx, w.Interval, w.Log, "webhook event pass", func(ctx context.Context) error {
			_, err := w.Events.Once(ctx)
			return err
		})
	}()
	go func() {
		defer wg.Done()
		pruned := time.Time{}
		_ = periodic.Run(ctx, w.Interval, w.Log, "webhook sender", func(ctx context.Context) error {
			if _, err := w.Sender.SendOnce(ctx); err != nil {
				return err
			}
			if now := w.Sender.now(); now.Sub(pruned) > time.Hour {
				if _, err := w.Sender.Outbox.PruneHookDeliveries(ctx, now.Add(-keepFinished), 1000); err != nil {
					return err
				}
				pruned = now
			}
			return nil
		})
	}()
	wg.Wait()
	return nil
}
