package server

import (
	"log/slog"
	"time"

	"github.com/jobapi/jobapi/builds/hooks"
	"github.com/jobapi/jobapi/builds/pgstore"
	"github.com/jobapi/jobapi/handlers"
)

// hookPassInterval is how often a replica looks for new events and due deliveries: a
// webhook leaves about a second after its event, one or two queries when nothing is due.
const hookPassInterval = time.Second

// newHooks is the webhook service and the replica's worker: one outbox in Postgres for
// project webhooks and forge commit statuses.
func newHooks(cfg Config, opts Options, store *pgstore.Store, log *slog.Logger) (*hooks.Service, *hooks.Worker) {
	site := hooks.Site{BaseURL: cfg.ExternalURL, Namespace: handlers.ProjectNamespace}
	sender := &hooks.Sender{Outbox: store, Site: site, Timeout: cfg.HooksTimeout, MaxAttempts: cfg.HooksMaxAttempts,
		Backoff: cfg.HooksRetryBackoff, DisableBackoff: cfg.HooksDisableBackoff, AllowLocal: cfg.HooksAllowLocalNetwork, Now: opts.Now, Log: log}
	svc := hooks.NewService(hooks.Deps{Store: store, Log: store, Sender: sender, AllowLocal: cfg.HooksAllowLocalNetwork, Now: opts.Now})
	w := &hooks.Worker{Events: &hooks.EventPass{Outbox: store, Site: site, Now: opts.Now}, Sender: sender,
		Interval: hookPassInterval, Log: log}
	return svc, w
}

// setHookBaseURL sets the base URL payloads link to and X-Gitlab-Instance names: the
// external URL, else the replica's own listening address.
func (d *domain) setHookBaseURL(external, listening string) {
	base := external
	if base == "" {
		base = listening
	}
	d.hookWorker.Sender.Site.BaseURL = base
	d.hookWorker.Events.Site.BaseURL = base
}
