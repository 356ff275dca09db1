package pushtest_test

import (
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds/pushes"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// A file:// remote cannot call back: polling it finds pushes. The first poll records the
// heads and starts nothing; a push is one pipeline (source push, before_sha the head seen
// before) however many replicas poll at once; a new branch starts one with no before; a
// deleted branch starts nothing.
func TestPollingStartsEachPushOnce(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	replicas := []*jobapitest.Instance{inst, inst.Replica(t, jobapitest.Options{}), inst.Replica(t, jobapitest.Options{})}
	r := newRepo(t)
	first := r.Commit(map[string]string{".gitlab-ci.yml": ciConfig})
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "polled", "repo_url": "file://" + r.Bare}, &p)
	var st api.PushSettings
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d/push_settings", p.ID), map[string]any{"poll_interval": 5}, &st)
	if st.PollInterval != 5 || st.PolledAt != nil || st.WebhookSecretSet {
		t.Fatalf("settings %+v: want polling every 5 s, not polled yet, no secret", st)
	}

	// All replicas' passes at once: the project is due, one of them polls it; the first
	// poll records heads only.
	counts := raceAll(t, replicas, func(inst *jobapitest.Instance) (pushes.PollCounts, error) { return inst.Pushes.PollOnce(t.Context()) })
	if sum(counts, func(c pushes.PollCounts) int { return c.Polled }) != 1 || sum(counts, func(c pushes.PollCounts) int { return c.Started }) != 0 {
		t.Fatalf("first passes %+v: want one poll, no pipeline", counts)
	}
	if n := pipelineCount(t, inst, p.ID); n != 0 {
		t.Fatalf("%d pipelines after the first poll, want 0 (it records heads)", n)
	}
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/push_settings", p.ID), nil, &st)
	if st.PolledAt == nil || st.PollError != "" {
		t.Fatalf("settings after a poll %+v: want polled_at, no error", st)
	}

	// A push to main, polled by every replica at once (each reads the remote and races to
	// move the head): one pipeline.
	second := r.Commit(map[string]string{"docs/guide.md": "# guide\n"})
	counts = raceAll(t, replicas, func(inst *jobapitest.Instance) (pushes.PollCounts, error) {
		return inst.Pushes.PollProject(t.Context(), p.ID)
	})
	if started := sum(counts, func(c pushes.PollCounts) int { return c.Started }); started != 1 {
		t.Fatalf("polls %+v started %d pipelines, want 1", counts, started)
	}
	var pipes []struct {
		ID        int64
		Ref       string
		SHA       string
		BeforeSHA string
		Source    string
	}
	rows, err := inst.Pool.Query(t.Context(), "SELECT id, ref, sha, before_sha, source FROM pipelines WHERE project_id = $1 ORDER BY id", p.ID)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var x struct {
			ID        int64
			Ref       string
			SHA       string
			BeforeSHA string
			Source    string
		}
		if err := rows.Scan(&x.ID, &x.Ref, &x.SHA, &x.BeforeSHA, &x.Source); err != nil {
			t.Fatal(err)
		}
		pipes = append(pipes, x)
	}
	if len(pipes) != 1 || pipes[0].Ref != "main" || pipes[0].SHA != second || pipes[0].BeforeSHA != first || pipes[0].Source != "push" {
		t.Fatalf("pipelines %+v: want one push pipeline of main at %s before %s", pipes, second, first)
	}
	if got := jobNames(getPipeline(t, inst, p.ID, pipes[0].ID)); got != "build,docs" {
		t.Errorf("jobs %s: want build,docs (docs/ changed since the head seen before)", got)
	}

	// Polled again with nothing new: nothing.
	if c, err := replicas[1].Pushes.PollProject(t.Context(), p.ID); err != nil || c.Started != 0 || c.Polled != 1 {
		t.Fatalf("poll without a push: %+v, %v", c, err)
	}

	// A new branch: its pipeline has no before (zeros), as a push of a new branch says.
	git(t, r.Work, "checkout", "--quiet", "-b", "feature")
	third := r.Commit(map[string]string{"src/f.go": "package f\n"})
	resp, raw := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/push_settings/poll", p.ID), nil)
	jobapitest.WantStatus(t, resp, raw, http.StatusOK)
	n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM pipelines WHERE project_id = $1 AND ref = 'feature' AND sha = $2 AND before_sha = $3",
		p.ID, third, "0000000000000000000000000000000000000000")
	if n != 1 || pipelineCount(t, inst, p.ID) != 2 {
		t.Fatalf("new branch: %d pipelines of feature with no before, %d in all; want 1, 2", n, pipelineCount(t, inst, p.ID))
	}

	// A deleted branch: nothing.
	git(t, r.Work, "push", "--quiet", r.Bare, "--delete", "feature")
	if c, err := inst.Pushes.PollProject(t.Context(), p.ID); err != nil || c.Started != 0 {
		t.Fatalf("poll after a deletion: %+v, %v", c, err)
	}
	if n := pipelineCount(t, inst, p.ID); n != 2 {
		t.Fatalf("%d pipelines after a deletion, want 2", n)
	}

	// An unreadable remote: the poll says why, and starts nothing.
	inst.MustDo(t, http.StatusOK, "PUT", fmt.Sprintf("/api/v4/projects/%d", p.ID), map[string]any{"repo_url": "file://" + r.Bare + "-gone"}, nil)
	if c, err := inst.Pushes.PollProject(t.Context(), p.ID); err != nil || c.Failed != 1 {
		t.Fatalf("poll of a missing remote: %+v, %v; want one failure", c, err)
	}
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/push_settings", p.ID), nil, &st)
	if st.PollError == "" {
		t.Errorf("settings %+v: want the poll's error", st)
	}
}

func raceAll(t *testing.T, replicas []*jobapitest.Instance, poll func(*jobapitest.Instance) (pushes.PollCounts, error)) []pushes.PollCounts {
	t.Helper()
	out := make([]pushes.PollCounts, len(replicas))
	var wg sync.WaitGroup
	for i, inst := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := poll(inst)
			if err != nil {
				t.Error(err)
			}
			out[i] = c
		}()
	}
	wg.Wait()
	return out
}

func sum(counts []pushes.PollCounts, f func(pushes.PollCounts) int) int {
	n := 0
	for _, c := range counts {
		n += f(c)
	}
	return n
}

// A git server's post-receive hook may call …/push_settings/poll on a project that does not
// poll: the first call records the heads, the next one after a push starts its pipeline.
func TestPollOnDemand(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{})
	r := newRepo(t)
	first := r.Commit(map[string]string{".gitlab-ci.yml": ciConfig})
	var p api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "hooked", "repo_url": "file://" + r.Bare}, &p)
	poll := fmt.Sprintf("/api/v4/projects/%d/push_settings/poll", p.ID)
	var res api.PollResult
	inst.MustDo(t, http.StatusOK, "POST", poll, nil, &res)
	if res.Polled != 1 || res.Recorded != 1 || res.Started != 0 {
		t.Fatalf("first poll %+v: want main recorded, nothing started", res)
	}
	second := r.Commit(map[string]string{"src/a.go": "package a\n"})
	inst.MustDo(t, http.StatusOK, "POST", poll, nil, &res)
	if res.Started != 1 {
		t.Fatalf("poll after a push %+v: want one pipeline", res)
	}
	n := jobapitest.QueryInt(t, inst.Pool, "SELECT count(*) FROM pipelines WHERE project_id = $1 AND sha = $2 AND before_sha = $3 AND source = 'push'",
		p.ID, second, first)
	if n != 1 {
		t.Fatalf("%d push pipelines at %s before %s, want 1", n, second, first)
	}
	var st api.PushSettings
	inst.MustDo(t, http.StatusOK, "GET", fmt.Sprintf("/api/v4/projects/%d/push_settings", p.ID), nil, &st)
	if st.PollInterval != 0 || st.PolledAt == nil {
		t.Errorf("settings %+v: polling still off, polled_at set", st)
	}
	resp, raw := inst.Do(t, "POST", fmt.Sprintf("/api/v4/projects/%d/push_settings/poll", p.ID+1000), nil)
	jobapitest.WantJSONError(t, resp, raw, http.StatusNotFound)
}
