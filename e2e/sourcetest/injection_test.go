package sourcetest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
)

// TestRevisionOptionInjection: a ref or sha that git would read as an option
// (--upload-pack=<command>) is a 400 naming the field on every path that reaches the
// project's repository (lint, a pipeline from YAML or from JSON, rules:changes, rules:exists,
// a child pipeline's trigger), and the command never runs on the server.
func TestRevisionOptionInjection(t *testing.T) {
	t.Parallel()
	bare, sha := includeRepo(t)
	inst := jobapitest.Start(t, jobapitest.Options{})
	var project api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "inject", "repo_url": "file://" + bare}, &project)
	base := fmt.Sprintf("/api/v4/projects/%d", project.ID)
	dir := t.TempDir()
	const (
		includeCI = "include:\n  - local: ci/build.yml\nstages: [build]\n"
		changesCI = "job:\n  script: x\n  rules:\n    - changes: {paths: [ci/*], compare_to: main}\n"
		existsCI  = "job:\n  script: x\n  rules:\n    - exists: [ci/build.yml]\n"
		childCI   = "child:\n  trigger: {include: ci/build.yml}\n"
	)
	n := 0
	// evil is a revision that makes git fetch run a command that leaves the file marker.
	evil := func() (rev, marker string) {
		n++
		marker = filepath.Join(dir, fmt.Sprintf("ran-%d", n))
		return "--upload-pack=touch " + marker + ";git-upload-pack", marker
	}
	type call struct {
		name, method, path string
		body               any
		yaml               bool
		field              string
	}
	var calls []call
	var markers []string
	add := func(name, field string, mk func(rev string) call) {
		rev, marker := evil()
		c := mk(rev)
		c.name, c.field = name, field
		calls = append(calls, c)
		markers = append(markers, marker)
	}
	add("lint ref", "ref", func(rev string) call {
		return call{method: "POST", path: base + "/ci/lint", body: map[string]any{"content": includeCI, "ref": rev}}
	})
	add("lint YAML ref", "ref", func(rev string) call {
		return call{method: "POST", path: base + "/ci/lint?ref=" + url.QueryEscape(rev), body: includeCI, yaml: true}
	})
	add("YAML pipeline sha", "sha", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline?sha=" + url.QueryEscape(strings.Replace(rev, "touch", "id>", 1)), body: includeCI, yaml: true}
	})
	add("YAML pipeline ref", "ref", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline?ref=" + url.QueryEscape(rev), body: includeCI, yaml: true}
	})
	add("JSON ci_config ref", "ref", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline", body: map[string]any{"ref": rev, "ci_config": includeCI}}
	})
	add("JSON ci_config sha", "sha", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline", body: map[string]any{"ref": "main", "sha": rev, "ci_config": includeCI}}
	})
	add("JSON jobs ref", "ref", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline", body: map[string]any{"ref": rev, "stages": []string{"test"},
			"jobs": []map[string]any{{"name": "j", "stage": "test", "script": []string{"true"}}}}}
	})
	add("rules:changes ref", "ref", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline?ref=" + url.QueryEscape(rev), body: changesCI, yaml: true}
	})
	add("rules:changes before_sha", "before_sha", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline?ref=main&sha=" + sha + "&before_sha=" + url.QueryEscape(rev), body: changesCI, yaml: true}
	})
	add("rules:exists ref", "ref", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline?ref=" + url.QueryEscape(rev), body: existsCI, yaml: true}
	})
	add("child pipeline ref", "ref", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline?ref=" + url.QueryEscape(rev), body: childCI, yaml: true}
	})
	add("child pipeline ref with a sha", "ref", func(rev string) call {
		return call{method: "POST", path: base + "/pipeline?ref=" + url.QueryEscape(rev) + "&sha=" + sha, body: childCI, yaml: true}
	})
	for _, c := range calls {
		var hdr []string
		if c.yaml {
			hdr = []string{"Content-Type", "application/yaml"}
		}
		resp, b := inst.Do(t, c.method, c.path, c.body, hdr...)
		var msg struct{ Message string }
		_ = json.Unmarshal(b, &msg)
		if resp.StatusCode != http.StatusBadRequest || !strings.HasPrefix(msg.Message, c.field+" ") {
			t.Errorf("%s: %d %s; want 400 whose message starts with %q", c.name, resp.StatusCode, b, c.field+" ")
		}
	}
	// Whatever was created, its bridges read the repository too.
	if _, err := inst.Server.Bridges.CreateOnce(context.Background()); err != nil {
		t.Logf("bridge pass: %v", err)
	}
	for i, m := range markers {
		if _, err := os.Stat(m); err == nil {
			t.Errorf("%s: the injected command ran on the server (%s exists)", calls[i].name, m)
		}
	}
}
