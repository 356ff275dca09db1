package webui

import (
	"testing"

	"github.com/jobapi/jobapi/builds"
)

// TestAllowedFailureIsAWarning: a failed job with allow_failure shows as GitLab's warning,
// with words and an icon (not only a colour); a successful pipeline with one "passed with
// warnings"; every other state as before.
func TestAllowedFailureIsAWarning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		b    builds.Build
		want look
	}{
		{builds.Build{Status: builds.StatusFailed, AllowFailure: true}, look{Class: "warning", Label: "failed (allowed to fail)", Icon: "⚠"}},
		{builds.Build{Status: builds.StatusFailed}, look{Class: "failed", Label: "failed"}},
		{builds.Build{Status: builds.StatusSuccess, AllowFailure: true}, look{Class: "success", Label: "success"}},
		{builds.Build{Status: builds.StatusManual, AllowFailure: true}, look{Class: "manual", Label: "manual"}},
		{builds.Build{Status: builds.StatusWaiting}, look{Class: "waiting_for_runner_ack", Label: "waiting for ack"}},
	} {
		if got := jobLook(tc.b); got != tc.want {
			t.Errorf("jobLook(%s, allow_failure %t) = %+v, want %+v", tc.b.Status, tc.b.AllowFailure, got, tc.want)
		}
	}
	if got := pipelineLook(builds.PipelineSuccess, true); got != (look{Class: "warning", Label: "passed with warnings", Icon: "⚠"}) {
		t.Errorf("success with warnings: %+v", got)
	}
	if got := pipelineLook(builds.PipelineSuccess, false); got != (look{Class: "success", Label: "success"}) {
		t.Errorf("success: %+v", got)
	}
	// A failed pipeline is failed, whatever else was allowed to fail.
	if got := pipelineLook(builds.PipelineFailed, true); got != (look{Class: "failed", Label: "failed"}) {
		t.Errorf("failed with warnings: %+v", got)
	}

	// Only the latest attempt counts: a retried failure that then passed is no warning.
	p := builds.Pipeline{Builds: []builds.Build{
		{ID: 1, Status: builds.StatusFailed, AllowFailure: true, RetriedBy: 2},
		{ID: 2, Status: builds.StatusSuccess, AllowFailure: true},
	}}
	if pipelineWarnings(p) {
		t.Error("a retried allowed failure counts as a warning")
	}
	p.Builds = append(p.Builds, builds.Build{ID: 3, Status: builds.StatusFailed, AllowFailure: true})
	if !pipelineWarnings(p) {
		t.Error("a latest allowed failure is no warning")
	}
}

func TestCoverageText(t *testing.T) {
	t.Parallel()
	c := 87.456
	if got := coverageText(&c); got != "87.46%" {
		t.Errorf("coverageText(87.456) = %q", got)
	}
	if got := coverageText(nil); got != "" {
		t.Errorf("coverageText(nil) = %q", got)
	}
}
