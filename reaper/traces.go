package reaper

import (
	"context"
	"log/slog"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/jobapi/jobapi/builds/joblogs"
	"github.com/jobapi/jobapi/periodic"
)

// TraceArchiver archives finished builds' logs into the object store (joblogs.Service's
// ArchiveTraces): at once for the builds this replica finished (Requests), and in a pass
// every Interval for every build whose log is not archived yet, whichever replica or path
// finished it, so that a store outage, a failed attempt or a replica killed before its
// archive delays a log, never loses it. Safe on every replica: builds are claimed with SKIP
// LOCKED and a lease.
type TraceArchiver struct {
	Archive interface {
		ArchiveTraces(ctx context.Context, limit int, ids []int64) (joblogs.ArchivePass, error)
	}
	// Requests are builds just finished on this replica (nil: the pass alone).
	Requests <-chan int64
	Interval time.Duration
	Batch    int
	Log      *slog.Logger
	// OnPass, when set, is told what each batch did (the metrics).
	OnPass func(joblogs.ArchivePass, error)
}

func (t *TraceArchiver) batch() int {
	if t.Batch <= 0 {
		return 20 // logs of up to 100 MB each: a batch is done well inside its claim's lease
	}
	return t.Batch
}

// PassOnce archives every due log, batch by batch, until a batch comes back short.
func (t *TraceArchiver) PassOnce(ctx context.Context) (joblogs.ArchivePass, error) {
	var total joblogs.ArchivePass
	for {
		res, err := t.Archive.ArchiveTraces(ctx, t.batch(), nil)
		t.report(res, err)
		total.Add(res)
		if err != nil || res.Claimed < t.batch() {
			return total, err
		}
	}
}

func (t *TraceArchiver) report(res joblogs.ArchivePass, err error) {
	if t.OnPass != nil {
		t.OnPass(res, err)
	}
}

// Run serves Requests and makes a pass every Interval until ctx ends.
func (t *TraceArchiver) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		return periodic.Run(ctx, t.Interval, t.Log, "trace archive pass", func(ctx context.Context) error {
			res, err := t.PassOnce(ctx)
			if res.Archived > 0 || res.Failed > 0 {
				t.Log.InfoContext(ctx, "trace archive pass", "archived", res.Archived, "bytes", res.Bytes,
					"empty", res.Empty, "failed", res.Failed)
			}
			return err
		})
	})
	g.Go(func() error { return t.ServeRequests(ctx) })
	return g.Wait()
}

// ServeRequests archives just-finished builds as they come, a few at a time, until ctx
// ends; a failure is logged and left to the pass.
func (t *TraceArchiver) ServeRequests(ctx context.Context) error {
	if t.Requests == nil {
		<-ctx.Done()
		return nil
	}
	for {
		var ids []int64
		select {
		case <-ctx.Done():
			return nil
		case id := <-t.Requests:
			ids = append(ids, id)
		}
	more:
		for len(ids) < t.batch() {
			select {
			case id := <-t.Requests:
				ids = append(ids, id)
			default:
				break more
			}
		}
		res, err := t.Archive.ArchiveTraces(ctx, len(ids), ids)
		t.report(res, err)
		if err != nil && ctx.Err() == nil {
			t.Log.WarnContext(ctx, "logs of finished builds not archived at once; the pass will", "builds", len(ids), "error", err)
		}
	}
}
