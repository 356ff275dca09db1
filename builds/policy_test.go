package builds

import "testing"

func TestRetryPolicy(t *testing.T) {
	p := DefaultRetryPolicy(2)
	tests := []struct {
		name    string
		attempt int
		rule    RetryRule
		reason  string
		want    bool
	}{
		{"provisioning first attempt", 1, RetryRule{}, ReasonRunnerProvisioningTimeout, true},
		{"provisioning second attempt", 2, RetryRule{}, ReasonRunnerProvisioningTimeout, true},
		{"provisioning third attempt exhausted", 3, RetryRule{}, ReasonRunnerProvisioningTimeout, false},
		{"script failure not retried by default", 1, RetryRule{}, ReasonScriptFailure, false},
		{"job retry any reason", 1, RetryRule{Max: 1}, ReasonScriptFailure, true},
		{"job retry limit reached", 2, RetryRule{Max: 1}, ReasonScriptFailure, false},
		{"job retry when names reason", 1, RetryRule{Max: 2, When: []string{ReasonScriptFailure}}, ReasonScriptFailure, true},
		{"job retry when excludes reason", 1, RetryRule{Max: 2, When: []string{ReasonRunnerSystemFailure}}, ReasonScriptFailure, false},
		{"job retry always", 1, RetryRule{Max: 2, When: []string{"always"}}, ReasonUnknownFailure, true},
		{"stuck_or_timeout covers job timeout", 1, RetryRule{Max: 1, When: []string{ReasonStuckOrTimeoutFailure}}, ReasonJobExecutionTimeout, true},
		// A runner that vanished mid-job: GitLab's stuck-job worker fails it as
		// stuck_or_timeout_failure; jobapi's reaper names it no_updates_running.
		{"stuck_or_timeout covers a vanished runner", 1, RetryRule{Max: 1, When: []string{ReasonStuckOrTimeoutFailure}}, ReasonNoUpdatesRunning, true},
		{"stuck_or_timeout covers stuck pending", 1, RetryRule{Max: 1, When: []string{ReasonStuckOrTimeoutFailure}}, ReasonStuckPending, true},
		{"stuck_or_timeout does not cover a runner system failure", 1, RetryRule{Max: 1, When: []string{ReasonStuckOrTimeoutFailure}}, ReasonRunnerSystemFailure, false},
		{"a vanished runner is not a script failure", 1, RetryRule{Max: 1, When: []string{ReasonScriptFailure}}, ReasonNoUpdatesRunning, false},
		{"job max above default extends it", 3, RetryRule{Max: 5}, ReasonRunnerProvisioningTimeout, true},
		{"canceled never retried", 1, RetryRule{Max: 5}, ReasonJobCanceled, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Allows(tt.attempt, tt.rule, tt.reason); got != tt.want {
				t.Errorf("Allows(%d, %+v, %s) = %t, want %t", tt.attempt, tt.rule, tt.reason, got, tt.want)
			}
		})
	}
}

func TestRunnerCanRun(t *testing.T) {
	r := Runner{Tags: []string{"docker", "linux"}, RunUntagged: false}
	if !r.CanRun([]string{"docker"}) || !r.CanRun([]string{"linux", "docker"}) {
		t.Error("a runner must take jobs whose tags it has")
	}
	if r.CanRun([]string{"windows"}) || r.CanRun(nil) {
		t.Error("a runner must refuse other tags, and untagged jobs without run_untagged")
	}
	r.RunUntagged = true
	if !r.CanRun(nil) {
		t.Error("run_untagged takes untagged jobs")
	}
}
