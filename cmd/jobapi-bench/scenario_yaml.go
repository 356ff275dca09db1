package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"
)

// yamlPipeline: the YAML pipeline target, a pipeline of --yaml-jobs (2,000) jobs created from its
// .gitlab-ci.yml over HTTP in under a second: the request as an operator sends it (the YAML
// text as the body), so the time covers reading, compiling, validating and the database's
// COPY of every build. The file is shaped as large real ones are: a hidden template
// extended by every job, anchors, variables, a DAG of needs across stages and parallel
// copies. Its jobs carry a tag no runner has, and each pipeline is canceled once measured.
func (e *env) yamlPipeline(ctx context.Context) (*Result, error) {
	n := e.cfg.YAMLJobs
	tag := "bench-yaml-" + randHex(4)
	src := benchCIConfig(n, tag)
	rec := newRecorder()
	w := e.startWindow("yaml", true)
	var times []time.Duration
	for i := range e.cfg.YAMLRepeat {
		if ctx.Err() != nil {
			break
		}
		start := time.Now()
		id, err := e.createFromYAML(ctx, src)
		d := time.Since(start)
		if err != nil {
			rec.fail("create", err)
			continue
		}
		rec.add("create", d)
		times = append(times, d)
		e.logf("  pipeline %d of %d jobs from %.0f KB of YAML: %s", i+1, n, float64(len(src))/1024, d.Round(time.Millisecond))
		if err := e.admin(ctx, http.MethodPost, fmt.Sprintf("/api/v4/projects/1/pipelines/%d/cancel", id), nil, nil); err != nil {
			rec.fail("cancel", err)
		}
	}
	res := w.stop()
	r := e.result("yaml", res, rec)
	r.Unit = "jobs/s"
	r.Count = len(times)
	r.Params["jobs"] = n
	r.Params["yaml_bytes"] = len(src)
	if len(times) == 0 {
		return r, nil
	}
	slices.Sort(times)
	median := times[len(times)/2]
	r.Throughput = round3(float64(n) / median.Seconds())
	r.Extra["create_median_ms"] = round3(float64(median.Microseconds()) / 1000)
	r.Extra["create_max_ms"] = round3(float64(times[len(times)-1].Microseconds()) / 1000)
	r.Targets = append(r.Targets, Target{Name: fmt.Sprintf("%d-job pipeline from YAML (median)", n),
		Want: "< 1000 ms", Got: r.Extra["create_median_ms"].(float64), Unit: "ms", Met: median < time.Second})
	return r, nil
}

// createFromYAML posts src as the .gitlab-ci.yml of a pipeline of project 1; it returns the
// pipeline's id.
func (e *env) createFromYAML(ctx context.Context, src []byte) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.baseURL+"/api/v4/projects/1/pipeline?ref=main", bytes.NewReader(src))
	if err != nil {
		return 0, err
	}
	req.Header.Set("PRIVATE-TOKEN", e.adminToken)
	req.Header.Set("Content-Type", "application/yaml")
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return 0, fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, b)
	}
	// The id is the answer's first field; the rest (every job) is not needed here.
	var id int64
	if _, err := fmt.Sscanf(string(b), `{"id":%d`, &id); err != nil {
		return 0, fmt.Errorf("no id in %.100s", b)
	}
	return id, nil
}

// benchCIConfig writes a .gitlab-ci.yml of n jobs: a fifth each in build and test (each
// test job needs its build job), deploy jobs in stage order, and the rest as parallel: 5
// copies of lint jobs.
func benchCIConfig(n int, tag string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "stages: [build, test, lint, deploy]\nvariables:\n  GO_VERSION: \"1.26\"\n  CGO_ENABLED: \"0\"\n")
	fmt.Fprintf(&b, ".defaults: &defaults\n  retry: 1\n  timeout: 30 minutes\n")
	fmt.Fprintf(&b, ".job:\n  <<: *defaults\n  image: golang:$GO_VERSION\n  tags: [%s]\n  before_script:\n    - go version\n"+
		"  cache:\n    key: go-mod\n    paths: [.cache/go-mod]\n", tag)
	fifth := n / 5
	lint := (n - 3*fifth) / 5 // parallel: 5 copies each
	for i := range fifth {
		fmt.Fprintf(&b, "build-%d:\n  extends: .job\n  stage: build\n  script:\n    - go build ./pkg%d/...\n"+
			"  artifacts:\n    paths: [bin/pkg%[2]d]\n    expire_in: 1 day\n", i, i)
		fmt.Fprintf(&b, "test-%d:\n  extends: .job\n  stage: test\n  needs: [build-%[1]d]\n  script: go test ./pkg%[1]d/...\n"+
			"  variables:\n    PKG: pkg%[1]d\n", i)
		fmt.Fprintf(&b, "deploy-%d:\n  extends: .job\n  stage: deploy\n  script: ./deploy pkg%[1]d\n"+
			"  rules:\n    - if: $CI_COMMIT_BRANCH == \"main\"\n", i)
	}
	for i := range lint {
		fmt.Fprintf(&b, "lint-%d:\n  extends: .job\n  stage: lint\n  parallel: 5\n  script: ./lint --shard $CI_NODE_INDEX\n", i)
	}
	for i := 3*fifth + 5*lint; i < n; i++ {
		fmt.Fprintf(&b, "extra-%d:\n  extends: .job\n  stage: lint\n  script: echo %[1]d\n", i)
	}
	return []byte(b.String())
}
