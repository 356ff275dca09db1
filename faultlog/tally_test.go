package faultlog

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Split(strings.TrimSpace(s.b.String()), "\n")
}

// A fault repeated a thousand times is logged once at once and once as a count, not a
// thousand times.
func TestTallyLogsOncePerInterval(t *testing.T) {
	var buf syncBuffer
	tally := NewTally(slog.New(slog.NewTextHandler(&buf, nil)), "degraded", 50*time.Millisecond)
	ctx := context.Background()
	for range 1000 {
		tally.Count(ctx, "queue_version_unavailable", errors.New("i/o timeout"))
	}
	tally.Count(ctx, "ack_key_not_set", nil)
	time.Sleep(80 * time.Millisecond)
	lines := buf.lines()
	if len(lines) != 2 {
		t.Fatalf("%d lines, want the first occurrence and one summary:\n%s", len(lines), strings.Join(lines, "\n"))
	}
	if !strings.Contains(lines[0], "what=queue_version_unavailable") || !strings.Contains(lines[0], "i/o timeout") {
		t.Errorf("first line %q: want what and the error", lines[0])
	}
	if !strings.Contains(lines[1], "queue_version_unavailable=999") || !strings.Contains(lines[1], "ack_key_not_set=1") ||
		!strings.Contains(lines[1], `queue_version_unavailable_last_error="i/o timeout"`) {
		t.Errorf("summary %q: want the counts of each and the last error", lines[1])
	}
	// Quiet for an interval: the next fault is said at once again.
	time.Sleep(120 * time.Millisecond)
	tally.Count(ctx, "queue_version_unavailable", errors.New("refused"))
	if lines := buf.lines(); len(lines) != 3 || !strings.Contains(lines[2], "refused") {
		t.Errorf("after a quiet interval: %q; want the new fault logged at once", lines)
	}
}
