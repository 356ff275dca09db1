package pushes

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig"
	"github.com/jobapi/jobapi/periodic"
)

// Bounds of one poll pass.
const (
	pollBatch = 8 // projects a pass claims at once
	// maxStartsPerPoll bounds the pipelines one poll of a project starts: a push of many
	// tags at once starts pipelines for the first ones; the rest are recorded as seen.
	maxStartsPerPoll = 20
	// deliveryRetention is how long a delivery id is remembered: forges redeliver within
	// days (GitHub keeps deliveries three days for redelivery).
	deliveryRetention = 30 * 24 * time.Hour
	pruneBatch        = 1000
)

// PollCounts is what a poll pass did.
type PollCounts struct {
	Polled    int // projects whose remote was read
	Failed    int // projects whose remote could not be read
	Recorded  int // heads recorded by first polls, without pipelines
	Started   int // pipelines created
	Forgotten int // delivery ids past retention
}

// PollOnce polls the projects due now, a batch at a time, each claimed by this pass alone
// for its interval, and forgets old delivery ids.
func (s *Service) PollOnce(ctx context.Context) (PollCounts, error) {
	var total PollCounts
	for {
		targets, err := s.store.ClaimPolls(ctx, s.now(), pollBatch)
		if err != nil {
			return total, fmt.Errorf("claim polls: %w", err)
		}
		for _, t := range targets {
			c := s.poll(ctx, t)
			total.Polled += c.Polled
			total.Failed += c.Failed
			total.Recorded += c.Recorded
			total.Started += c.Started
		}
		if len(targets) < pollBatch || ctx.Err() != nil {
			break
		}
	}
	n, err := s.store.PruneDeliveries(ctx, s.now().Add(-deliveryRetention), pruneBatch)
	total.Forgotten = n
	if err != nil {
		return total, fmt.Errorf("forget old deliveries: %w", err)
	}
	return total, nil
}

// PollProject polls one project now, due or not (the API's "poll now", and tests). Several
// replicas polling the same project at once start each new head's pipeline once.
func (s *Service) PollProject(ctx context.Context, projectID int64) (PollCounts, error) {
	t, err := s.store.PollTarget(ctx, projectID)
	if err != nil {
		return PollCounts{}, err
	}
	if t.RepoURL == "" {
		return PollCounts{}, &builds.ValidationError{Msg: fmt.Sprintf("project %d has no repo_url to poll", projectID)}
	}
	return s.poll(ctx, t), nil
}

// Run polls every tick until ctx ends (jittered, with periodic's backoff on failures).
func (s *Service) Run(ctx context.Context, tick time.Duration) error {
	return periodic.Run(ctx, tick, s.log, "push poll", func(ctx context.Context) error {
		_, err := s.PollOnce(ctx)
		return err
	})
}

// poll reads a project's remote and starts a push pipeline for each head that moved since
// the heads recorded; the first poll after polling was turned on records them only
// (otherwise turning polling on would build every branch and tag at once).
func (s *Service) poll(ctx context.Context, t PollTarget) PollCounts {
	var c PollCounts
	log := s.log.With("project_id", t.ProjectID)
	var heads []Head
	err := fmt.Errorf("project %d has no repo_url to poll", t.ProjectID)
	if t.RepoURL != "" {
		heads, err = s.heads(ctx, t.RepoURL)
	}
	if err != nil {
		c.Failed++
		log.WarnContext(ctx, "push poll: the remote could not be read", "error", err)
		if err := s.store.PollFailed(ctx, t.ProjectID, err.Error()); err != nil {
			log.ErrorContext(ctx, "push poll: record the failure", "error", err)
		}
		return c
	}
	c.Polled++
	if !t.Primed {
		if err := s.store.RecordHeads(ctx, t.ProjectID, heads, s.now()); err != nil {
			log.ErrorContext(ctx, "push poll: record heads", "error", err)
			return c
		}
		c.Recorded += len(heads)
		s.polled(ctx, t.ProjectID, "")
		return c
	}
	recorded, err := s.store.Heads(ctx, t.ProjectID)
	if err != nil {
		log.ErrorContext(ctx, "push poll: read heads", "error", err)
		return c
	}
	var failure string
	seen := make(map[string]bool, len(heads))
	for _, h := range heads {
		seen[h.Ref] = true
		old, known := recorded[h.Ref]
		if known && old == h.SHA {
			continue
		}
		moved, err := s.store.MoveHead(ctx, t.ProjectID, h.Ref, old, h.SHA, s.now())
		if err != nil {
			log.ErrorContext(ctx, "push poll: move head", "ref", h.Ref, "error", err)
			continue
		}
		if !moved {
			continue // another replica's poll took this push
		}
		if c.Started >= maxStartsPerPoll {
			log.WarnContext(ctx, "push poll: too many new heads at once; recorded without a pipeline", "ref", h.Ref, "sha", h.SHA)
			continue
		}
		before := old
		if !known {
			before = builds.ZeroSHA // a new branch or tag, as a push of one says
		}
		p, err := s.start(builds.WithActor(ctx, builds.Actor{Kind: builds.ActorSystem, Username: "push poll"}),
			Start{ProjectID: t.ProjectID, Ref: pipelineRef(h.Ref), SHA: h.SHA, BeforeSHA: before, Source: builds.SourcePush})
		switch {
		case err == nil:
			c.Started++
			log.InfoContext(ctx, "push poll: pipeline created", "ref", h.Ref, "sha", h.SHA, "pipeline_id", p.ID)
		case errors.Is(err, ciconfig.ErrFilteredOut), errors.Is(err, ciconfig.ErrNoJobs):
			// rules build nothing for this push: done with it
		case transient(err):
			// Given back, so that the next poll tries again (the pass that moved it is the
			// only one that can).
			if _, rerr := s.store.MoveHead(ctx, t.ProjectID, h.Ref, h.SHA, old, s.now()); rerr != nil {
				log.ErrorContext(ctx, "push poll: give a head back after a failed start", "ref", h.Ref, "error", rerr)
			}
			failure = fmt.Sprintf("%s at %s: %v", h.Ref, h.SHA, err)
			log.WarnContext(ctx, "push poll: pipeline not created; the next poll tries again", "ref", h.Ref, "error", err)
		default:
			// The commit's configuration is wrong: the push is seen, and the next one may fix it.
			failure = fmt.Sprintf("%s at %s: %v", h.Ref, h.SHA, err)
			log.WarnContext(ctx, "push poll: pipeline not created", "ref", h.Ref, "sha", h.SHA, "error", err)
		}
	}
	for ref, old := range recorded {
		if !seen[ref] {
			// A deleted branch or tag builds nothing; forgetting it makes its return a new ref.
			if _, err := s.store.MoveHead(ctx, t.ProjectID, ref, old, "", s.now()); err != nil {
				log.ErrorContext(ctx, "push poll: forget a deleted ref", "ref", ref, "error", err)
			}
		}
	}
	s.polled(ctx, t.ProjectID, failure)
	return c
}

func (s *Service) polled(ctx context.Context, projectID int64, failure string) {
	if err := s.store.Polled(ctx, projectID, s.now(), failure); err != nil {
		s.log.ErrorContext(ctx, "push poll: record the poll", "project_id", projectID, "error", err)
	}
}

// transient tells a failure that may pass (the remote or a backend unreachable) from one
// about the commit (its configuration), which the same commit would meet again.
func transient(err error) bool {
	var ce *ciconfig.Error
	if errors.As(err, &ce) {
		return ce.Transient
	}
	var ve *builds.ValidationError
	return !errors.As(err, &ve) && !errors.Is(err, builds.ErrNotFound)
}
