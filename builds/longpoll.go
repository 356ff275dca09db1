package builds

import (
	"context"
	"slices"
	"strings"
)

// The long poll (JOBAPI_LONG_POLL) holds idle job requests until the queue changes; the hub
// that holds them and wakes only who can take what changed is builds/longpoll's Hub. What
// it needs of the domain is declared here: the feed of queue bumps and the count of what a
// claim could take, both served by the stores, and the profile a runner is matched on.

// QueueFeed announces queue bumps between replicas (Redis pub/sub).
type QueueFeed interface {
	// BumpAnnounced sets a new queue version and announces it; runnerID, when not 0, names
	// the runner whose settings or token changed.
	BumpAnnounced(ctx context.Context, runnerID int64) error
	// SubscribeQueue calls ready once the subscription is live, then fn for every bump
	// until ctx ends (nil) or the connection fails (an error).
	SubscribeQueue(ctx context.Context, ready func(), fn func(version string, runnerID int64)) error
}

// ClaimCounter counts what a claim could take (pgstore): how many pending builds a runner
// with these tags, run_untagged setting and access level (protectedOnly: ref_protected)
// could claim, up to limit.
type ClaimCounter interface {
	CountClaimable(ctx context.Context, tags []string, runUntagged, protectedOnly bool, limit int) (int, error)
}

// profileKey is what a claim matches a runner on: its tags, run_untagged and access level.
// Runners of one profile share the long poll's counts, the claim flights and the
// empty-profile record; a ref_protected runner must not be answered for a not_protected one.
func profileKey(r Runner) string {
	tags := slices.Clone(r.Tags)
	slices.Sort(tags)
	tags = slices.Compact(tags)
	u := "0"
	if r.RunUntagged {
		u = "1"
	}
	if r.ProtectedOnly() {
		u += "p"
	}
	return u + "\x00" + strings.Join(tags, "\x00")
}

// LongPollWaiters is how many idle job requests this replica holds (JOBAPI_LONG_POLL).
func (s *Service) LongPollWaiters() int { return s.wakes.Held() }

// RunQueueFeed keeps this replica's subscription to queue bumps, which wakes held long
// polls, until ctx ends (without a feed it waits: the version reads wake them).
func (s *Service) RunQueueFeed(ctx context.Context) error {
	if s.queueFeed == nil {
		<-ctx.Done()
		return nil
	}
	return s.wakes.Run(ctx, s.queueFeed)
}

// bumpRunner bumps the queue version for a change of runner id's settings or token: every
// replica drops its cached copy and wakes that runner's held requests.
func (s *Service) bumpRunner(ctx context.Context, id int64) {
	if s.queueFeed == nil {
		s.bumpQueue(ctx)
		return
	}
	for i := 0; i < 2; i++ {
		if err := s.queueFeed.BumpAnnounced(ctx, id); err == nil {
			return
		} else if i == 1 {
			s.log.WarnContext(ctx, "queue version not bumped; idle runners may see the runner's change late", "runner_id", id, "error", err)
		}
	}
}
