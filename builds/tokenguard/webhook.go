package tokenguard

import (
	"context"
	"strconv"
	"time"
)

// Default budgets of wrong webhook signatures per minute: per client address, and per
// project as a backstop against guessing one project's secret from many addresses.
const (
	DefaultWebhookFailuresPerClient  = 10
	DefaultWebhookFailuresPerProject = 60
)

// WebhookGuard throttles the guessing of projects' webhook secrets (the inbound
// webhooks, which carry a signature instead of a token). Once a client address, or a
// project, has spent its budget of wrong signatures for the minute, deliveries from that
// address or to that project are refused without checking the signature, right or
// wrong: otherwise a guesser would still learn which guess is right. Correct deliveries
// are never counted. The per-project budget lets someone who spends it hold up a
// project's deliveries until the minute ends; the forge retries, or the poller finds
// the push.
type WebhookGuard struct {
	limiter FailureLimiter
	// PerClient and PerProject are failures per minute (0: that budget is off).
	PerClient, PerProject int
}

// NewWebhookGuard throttles with limiter (nil: no throttling) at the default budgets.
func NewWebhookGuard(limiter FailureLimiter) *WebhookGuard {
	return &WebhookGuard{limiter: limiter, PerClient: DefaultWebhookFailuresPerClient, PerProject: DefaultWebhookFailuresPerProject}
}

// Budgets a refused delivery spent, as Throttled and Fail name them.
const (
	WebhookPerClient  = "client"
	WebhookPerProject = "project"
)

const (
	webhookClientScope  = "webhook_signature_failure"
	webhookProjectScope = "webhook_signature_failure_project"
)

// Throttled reports, without counting, whether client or project has spent its budget
// (which one, and the time until the window ends): the delivery is refused unchecked.
func (g *WebhookGuard) Throttled(client string, project int64) (budget string, retryAfter time.Duration) {
	if g == nil || g.limiter == nil {
		return "", 0
	}
	if g.PerClient > 0 {
		if over, r := g.limiter.Exceeded(webhookClientScope, client, g.PerClient, time.Minute); over {
			return WebhookPerClient, r
		}
	}
	if g.PerProject > 0 {
		if over, r := g.limiter.Exceeded(webhookProjectScope, strconv.FormatInt(project, 10), g.PerProject, time.Minute); over {
			return WebhookPerProject, r
		}
	}
	return "", 0
}

// Fail counts a wrong signature from client to project; budget is set once this failure
// passed one. err is the limiter's (Redis down): the failure then goes uncounted.
func (g *WebhookGuard) Fail(ctx context.Context, client string, project int64) (budget string, retryAfter time.Duration, err error) {
	if g == nil || g.limiter == nil {
		return "", 0, nil
	}
	if g.PerClient > 0 {
		ok, r, e := g.limiter.Fail(ctx, webhookClientScope, client, g.PerClient, time.Minute)
		if !ok {
			budget, retryAfter = WebhookPerClient, r
		}
		err = e
	}
	if g.PerProject > 0 {
		ok, r, e := g.limiter.Fail(ctx, webhookProjectScope, strconv.FormatInt(project, 10), g.PerProject, time.Minute)
		if !ok && budget == "" {
			budget, retryAfter = WebhookPerProject, r
		} else if !ok {
			retryAfter = max(retryAfter, r)
		}
		if e != nil {
			err = e
		}
	}
	return budget, retryAfter, err
}
