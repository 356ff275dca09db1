package pgflags

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/open-feature/go-sdk/openfeature"
)

// Options tunes a Provider; zero values take the defaults.
type Options struct {
	// Refresh is how often flags are reloaded without a notification (default 2s): the
	// bound on how late a replica sees a change whose NOTIFY it missed.
	Refresh time.Duration
	// Staleness is how old the snapshot may get while Postgres is unreachable before
	// evaluations fail over to the default (default 30s). Keep it several Refresh periods.
	Staleness time.Duration
	// QueryTimeout bounds each load and the LISTEN connection's setup (default 5s).
	QueryTimeout time.Duration
	// Logger receives state changes only (never a line per evaluation); default slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Refresh <= 0 {
		o.Refresh = 2 * time.Second
	}
	if o.Staleness <= 0 {
		o.Staleness = 30 * time.Second
	}
	if o.QueryTimeout <= 0 {
		o.QueryTimeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Provider is the OpenFeature provider over the Postgres flags. Evaluations read an in-memory
// snapshot and never touch Postgres: they run on every job request.
type Provider struct {
	pool       *pgxpool.Pool
	connConfig *pgx.ConnConfig // for the dedicated LISTEN connection
	opts       Options
	snap       atomic.Pointer[snapshot]
	events     chan openfeature.Event

	mu       sync.Mutex // serialises loads and the health bookkeeping below
	health   openfeature.State
	failures int // consecutive failed loads, for the recovery log line
}

var (
	_ openfeature.FeatureProvider          = (*Provider)(nil)
	_ openfeature.ContextAwareStateHandler = (*Provider)(nil)
	_ openfeature.EventHandler             = (*Provider)(nil)
)

// New returns a Provider reading pool. It holds no flags until Init or Run loads them.
func New(pool *pgxpool.Pool, opts Options) *Provider {
	return &Provider{
		pool:       pool,
		connConfig: pool.Config().ConnConfig,
		opts:       opts.withDefaults(),
		// Events only report state changes, a few per outage; the SDK drains them at once.
		events: make(chan openfeature.Event, 16),
		health: openfeature.NotReadyState,
	}
}

// Metadata names the provider.
func (p *Provider) Metadata() openfeature.Metadata {
	return openfeature.Metadata{Name: "jobapi-postgres"}
}

// Hooks: none.
func (p *Provider) Hooks() []openfeature.Hook { return nil }

// EventChannel reports health changes (READY, STALE, ERROR) and configuration changes to the
// SDK, so its provider state follows the snapshot's.
func (p *Provider) EventChannel() <-chan openfeature.Event { return p.events }

// Init loads the first snapshot; the SDK calls it when the provider is registered.
func (p *Provider) Init(evalCtx openfeature.EvaluationContext) error {
	return p.InitWithContext(context.Background(), evalCtx)
}

// InitWithContext loads the first snapshot. An error leaves the SDK in the ERROR state and
// evaluations returning defaults until Run loads flags, which also reports READY.
func (p *Provider) InitWithContext(ctx context.Context, _ openfeature.EvaluationContext) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.load(ctx); err != nil {
		p.health = openfeature.ErrorState
		p.failures++
		return err
	}
	p.health = openfeature.ReadyState // the SDK announces READY itself once Init returns
	return nil
}

// Shutdown does nothing: Run owns the goroutines and stops with its context.
func (p *Provider) Shutdown() {}

// ShutdownWithContext does nothing, see Shutdown.
func (p *Provider) ShutdownWithContext(context.Context) error { return nil }

// Refresh reloads every flag now. Run calls it on each tick and notification; tests call it
// to skip the wait.
func (p *Provider) Refresh(ctx context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.snap.Load()
	cur, err := p.load(ctx)
	if err != nil && ctx.Err() != nil {
		return err // shutting down: not a Postgres failure worth reporting
	}
	p.noteLoad(old, cur, err)
	return err
}

// load reads every flag and publishes them as the current snapshot.
func (p *Provider) load(ctx context.Context) (*snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, p.opts.QueryTimeout)
	defer cancel()
	started := time.Now()
	rows, err := loadFlags(ctx, p.pool, nil)
	if err != nil {
		return nil, fmt.Errorf("load feature flags: %w", err)
	}
	s := newSnapshot(started, rows)
	p.snap.Store(s)
	return s, nil
}

// current returns the snapshot if it is fresh enough to answer from.
func (p *Provider) current() (*snapshot, *openfeature.ResolutionError) {
	s := p.snap.Load()
	if s == nil {
		e := openfeature.NewProviderNotReadyResolutionError("feature flags not loaded from Postgres yet")
		return nil, &e
	}
	if age := time.Since(s.loadedAt); age > p.opts.Staleness {
		e := openfeature.NewGeneralResolutionError(fmt.Sprintf(
			"feature flags last loaded from Postgres %s ago, more than the %s limit",
			age.Round(time.Millisecond), p.opts.Staleness))
		return nil, &e
	}
	return s, nil
}

// BooleanEvaluation evaluates flag from the snapshot. A flag never set answers the caller's
// default with FLAG_NOT_FOUND, as OpenFeature specifies and flagd does: for every context
// alike, which featureflags.Flags takes as off, neither a failure nor targeting.
func (p *Provider) BooleanEvaluation(_ context.Context, flag string, def bool, flatCtx openfeature.FlattenedContext) openfeature.BoolResolutionDetail {
	s, rerr := p.current()
	if rerr != nil {
		return openfeature.BoolResolutionDetail{Value: def, ProviderResolutionDetail: errorDetail(*rerr)}
	}
	f, ok := s.flags[flag]
	if !ok {
		return openfeature.BoolResolutionDetail{Value: def, ProviderResolutionDetail: errorDetail(
			openfeature.NewFlagNotFoundResolutionError(fmt.Sprintf("flag %q was never set", flag)))}
	}
	v, reason := f.evaluate(flag, flatCtx)
	variant := "off"
	if v {
		variant = "on"
	}
	return openfeature.BoolResolutionDetail{Value: v,
		ProviderResolutionDetail: openfeature.ProviderResolutionDetail{Reason: reason, Variant: variant}}
}

// StringEvaluation: every flag here is boolean.
func (p *Provider) StringEvaluation(_ context.Context, flag string, def string, _ openfeature.FlattenedContext) openfeature.StringResolutionDetail {
	return openfeature.StringResolutionDetail{Value: def, ProviderResolutionDetail: p.notBoolean(flag)}
}

// FloatEvaluation: every flag here is boolean.
func (p *Provider) FloatEvaluation(_ context.Context, flag string, def float64, _ openfeature.FlattenedContext) openfeature.FloatResolutionDetail {
	return openfeature.FloatResolutionDetail{Value: def, ProviderResolutionDetail: p.notBoolean(flag)}
}

// IntEvaluation: every flag here is boolean.
func (p *Provider) IntEvaluation(_ context.Context, flag string, def int64, _ openfeature.FlattenedContext) openfeature.IntResolutionDetail {
	return openfeature.IntResolutionDetail{Value: def, ProviderResolutionDetail: p.notBoolean(flag)}
}

// ObjectEvaluation: every flag here is boolean.
func (p *Provider) ObjectEvaluation(_ context.Context, flag string, def any, _ openfeature.FlattenedContext) openfeature.InterfaceResolutionDetail {
	return openfeature.InterfaceResolutionDetail{Value: def, ProviderResolutionDetail: p.notBoolean(flag)}
}

// notBoolean answers a non-boolean evaluation: TYPE_MISMATCH for a flag that exists,
// FLAG_NOT_FOUND otherwise (and the snapshot's own error first).
func (p *Provider) notBoolean(flag string) openfeature.ProviderResolutionDetail {
	s, rerr := p.current()
	if rerr != nil {
		return errorDetail(*rerr)
	}
	if _, ok := s.flags[flag]; ok {
		return errorDetail(openfeature.NewTypeMismatchResolutionError(fmt.Sprintf("flag %q is boolean", flag)))
	}
	return errorDetail(openfeature.NewFlagNotFoundResolutionError(fmt.Sprintf("flag %q not found", flag)))
}

func errorDetail(e openfeature.ResolutionError) openfeature.ProviderResolutionDetail {
	return openfeature.ProviderResolutionDetail{ResolutionError: e, Reason: openfeature.ErrorReason}
}
