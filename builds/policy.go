package builds

import "slices"

// RetryPolicy decides whether a failed build gets an automatic retry (SPEC §5): the
// per-reason defaults plus the job's own retry rule, whichever allows more.
type RetryPolicy struct {
	// Defaults maps a failure reason to how many retries it gets without the job asking.
	Defaults map[string]int
}

// DefaultRetryPolicy retries provisioning timeouts twice (JOBAPI_AUTO_RETRY_MAX).
func DefaultRetryPolicy(provisioningMax int) RetryPolicy {
	return RetryPolicy{Defaults: map[string]int{ReasonRunnerProvisioningTimeout: provisioningMax}}
}

// Limit is how many retries a build failing for reason may have in its chain.
func (p RetryPolicy) Limit(rule RetryRule, reason string) int {
	if reason == ReasonJobCanceled {
		return 0
	}
	limit := p.Defaults[reason]
	if rule.Max > limit && ruleCovers(rule, reason) {
		limit = rule.Max
	}
	return limit
}

// Allows reports whether attempt number `attempt` (1-based) failing for reason may be retried.
func (p RetryPolicy) Allows(attempt int, rule RetryRule, reason string) bool {
	return attempt-1 < p.Limit(rule, reason)
}

func ruleCovers(rule RetryRule, reason string) bool {
	if len(rule.When) == 0 || slices.Contains(rule.When, "always") {
		return true
	}
	if slices.Contains(rule.When, reason) {
		return true
	}
	// GitLab folds these together under one `when` value.
	if reason == ReasonJobExecutionTimeout || reason == ReasonNoUpdatesRunning || reason == ReasonStuckPending {
		return slices.Contains(rule.When, ReasonStuckOrTimeoutFailure)
	}
	return false
}

// RetryDecision is what the policy says about a build that just finished.
type RetryDecision struct {
	// Retry: create the next attempt now.
	Retry bool
	// Exhausted: the build had a retry budget and used it up (a retry_exhausted event).
	Exhausted bool
	// Limit is the budget that applied.
	Limit int
}

// DecideAutoRetry applies the policy to build b, which f just finished: only a failed
// build that is its job's latest attempt is retried, within the larger of the budgets of
// f.Reason and f.AlsoRetryAs. A nil f.Policy never retries.
func DecideAutoRetry(f Finish, b Build) RetryDecision {
	if b.Status != StatusFailed || f.Policy == nil || b.RetriedBy != 0 {
		return RetryDecision{}
	}
	limit := f.Policy.Limit(b.Payload.Retry, f.Reason)
	if f.AlsoRetryAs != "" {
		limit = max(limit, f.Policy.Limit(b.Payload.Retry, f.AlsoRetryAs))
	}
	if b.Attempt-1 < limit {
		return RetryDecision{Retry: true, Limit: limit}
	}
	return RetryDecision{Exhausted: limit > 0, Limit: limit}
}
