package reaper

import (
	"context"
	"log/slog"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/periodic"
)

// Artifacts is the artifacts pass: it deletes artifacts past their expire_in (but those of
// the latest successful pipeline of each ref, as GitLab keeps them), then removes from the
// object store every object no row needs any more: those of deleted and expired artifacts,
// and those of uploads that failed or died with their replica, once they could no longer
// be running. Safe on every replica: both steps take their rows with SKIP LOCKED.
type Artifacts struct {
	Store    artifacts.Store
	Objects  builds.ObjectStore
	Interval time.Duration
	Batch    int
	Now      func() time.Time
	Log      *slog.Logger
	// OnPass, when set, is told what each pass did (the metrics).
	OnPass func(ArtifactsPass, error)
}

// ArtifactsPass counts what one pass did, and what is stored after it.
type ArtifactsPass struct {
	Expired      int
	ExpiredBytes int64
	// Removed counts the objects deleted from the store.
	Removed int
	// Stored and StoredBytes count the artifacts kept, read at the end of the pass (when
	// TotalsRead).
	Stored, StoredBytes int64
	TotalsRead          bool
}

// PassOnce expires and cleans batch by batch until nothing is left or a step fails, then
// counts what is stored.
func (a *Artifacts) PassOnce(ctx context.Context) (ArtifactsPass, error) {
	res, err := a.pass(ctx)
	if err == nil {
		tctx, cancel := context.WithTimeout(ctx, batchTimeout)
		res.Stored, res.StoredBytes, err = a.Store.ArtifactTotals(tctx)
		res.TotalsRead = err == nil
		cancel()
	}
	if a.OnPass != nil {
		a.OnPass(res, err)
	}
	return res, err
}

func (a *Artifacts) pass(ctx context.Context) (ArtifactsPass, error) {
	var res ArtifactsPass
	batch := a.Batch
	if batch <= 0 {
		batch = 200
	}
	now := now(a.Now)
	for {
		bctx, cancel := context.WithTimeout(ctx, batchTimeout)
		n, bytes, err := a.Store.ExpireArtifacts(bctx, now, batch)
		cancel()
		res.Expired += n
		res.ExpiredBytes += bytes
		if err != nil {
			return res, err
		}
		if n < batch {
			break
		}
	}
	for {
		// One batch deletes its objects while it holds their rows: the timeout covers the
		// store's calls too.
		bctx, cancel := context.WithTimeout(ctx, batchTimeout)
		n, err := a.Store.CleanObjects(bctx, now, batch, func(key string) error { return a.Objects.Delete(bctx, key) })
		cancel()
		res.Removed += n
		if err != nil {
			return res, err
		}
		if n < batch {
			return res, nil
		}
	}
}

// Run makes a pass every Interval until ctx ends.
func (a *Artifacts) Run(ctx context.Context) error {
	return periodic.Run(ctx, a.Interval, a.Log, "artifacts pass", func(ctx context.Context) error {
		res, err := a.PassOnce(ctx)
		if res.Expired > 0 || res.Removed > 0 {
			a.Log.InfoContext(ctx, "artifacts pass", "expired", res.Expired, "expired_bytes", res.ExpiredBytes,
				"objects_removed", res.Removed)
		}
		return err
	})
}
