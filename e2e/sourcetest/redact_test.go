package sourcetest_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/downstream"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// lockedBuffer is a log the server and the test share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestUnreachableRemoteKeepsItsSecret: a git:// remote with credentials that cannot be
// reached fails a pipeline with a 400, a lint and a bridge's downstream_failed event with
// git's message, and none of them, nor the server log, carries the password.
func TestUnreachableRemoteKeepsItsSecret(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	log := &lockedBuffer{}
	inst := jobapitest.Start(t, jobapitest.Options{Now: now, Log: log})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects",
		map[string]any{"name": "secret", "repo_url": "git://user:secret@127.0.0.1:1/x.git"}, &project)
	const ci = "include:\n  - local: ci/build.yml\n"
	resp, b := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/pipeline?ref=main", project.ID), ci, "Content-Type", "application/yaml")
	if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "secret") || !strings.Contains(string(b), "could not be fetched") {
		t.Errorf("pipeline: %d %s; want 400 with git's message and no secret", resp.StatusCode, b)
	}
	resp, b = inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/ci/lint", project.ID), map[string]any{"content": ci, "ref": "main"})
	if strings.Contains(string(b), "secret") || !strings.Contains(string(b), "could not be fetched") {
		t.Errorf("lint: %d %s; want git's message and no secret", resp.StatusCode, b)
	}
	parent := inst.CreateYAML(t, project.ID, strings.Repeat("a", 40), "child:\n  trigger: {include: ci/child.yml}\n")
	if _, err := inst.Server.Bridges.CreateOnce(context.Background()); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("bridge pass: %v; want an error without the secret", err)
	}
	offset.Store(int64(downstream.MaxSourceWait + time.Minute))
	bridgePass(t, inst)
	bridge := bridgeNamed(t, bridges(t, inst, project.ID, parent.ID), "child")
	ev := jobapitest.EventsOf(inst.Events(t, project.ID, bridge.ID), "downstream_failed")
	if len(ev) != 1 || strings.Contains(fmt.Sprint(ev[0].Detail), "secret") || !strings.Contains(fmt.Sprint(ev[0].Detail), "could not be fetched") {
		t.Errorf("downstream_failed events %+v; want one with git's message and no secret", ev)
	}
	if strings.Contains(log.String(), "secret") {
		t.Errorf("the server log carries the secret:\n%s", log.String())
	}
}
