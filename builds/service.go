package builds

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds/claimpacing"
	"github.com/jobapi/jobapi/builds/longpoll"
	"github.com/jobapi/jobapi/builds/recent"
	"github.com/jobapi/jobapi/faultlog"
	"github.com/jobapi/jobapi/secrettoken"
)

// Config holds the service's tunables (SPEC §10).
type Config struct {
	AckTTL              time.Duration
	MaxProvisioningWait time.Duration
	TraceLimit          int64
	LongPoll            time.Duration
	Policy              RetryPolicy
	// TouchInterval throttles liveness writes: at most one per build per interval per replica.
	TouchInterval time.Duration
	// RunnerCacheTTL bounds how long a runner's settings are served from memory.
	RunnerCacheTTL time.Duration
	// MaxManagersPerRunner caps the system_ids one runner token may register (0: no cap).
	MaxManagersPerRunner int
	// RunnerTokenExpiresIn is the lifetime of a runner token issued from now on (0: tokens
	// never expire).
	RunnerTokenExpiresIn time.Duration
	// RunnerTokenRotationGrace is how long a token a runner replaced with its own reset keeps
	// working (0: it stops at once, as GitLab's does).
	RunnerTokenRotationGrace time.Duration
	// TraceChunkSize is how many live log bytes are flushed to Postgres at once (0:
	// DefaultTraceChunkSize).
	TraceChunkSize int64
	// LiveTraceCheck is how often a live log's state is checked against Postgres while its
	// runner PATCHes (0: DefaultLiveTraceCheck).
	LiveTraceCheck time.Duration
	// FallbackClaims paces the claims of job requests that cannot read the queue version
	// (claimpacing.Fallback).
	FallbackClaims claimpacing.FallbackConfig
}

// TwoPhaseFlag evaluates the allow_runner_job_acknowledgement flag (featureflags.Flags).
type TwoPhaseFlag interface {
	// TwoPhaseCommit evaluates it for a candidate build of projectID, and counts it.
	TwoPhaseCommit(ctx context.Context, projectID, runnerID int64, systemID string) bool
	// TwoPhaseCommitAnyProject evaluates it before the claim, counting nothing; anyProject:
	// the answer holds for a build of every project, so the claim need not ask per candidate.
	TwoPhaseCommitAnyProject(ctx context.Context, runnerID int64, systemID string) (on, anyProject bool)
	// CountTwoPhaseCommit counts a TwoPhaseCommitAnyProject answer a build was assigned by.
	CountTwoPhaseCommit(on bool)
}

// NeverTwoPhase is the TwoPhaseFlag of a service without flags (tests, the bench's twin):
// legacy for every build.
var NeverTwoPhase TwoPhaseFlag = neverTwoPhase{}

type neverTwoPhase struct{}

func (neverTwoPhase) TwoPhaseCommit(context.Context, int64, int64, string) bool { return false }
func (neverTwoPhase) TwoPhaseCommitAnyProject(context.Context, int64, string) (bool, bool) {
	return false, true
}
func (neverTwoPhase) CountTwoPhaseCommit(bool) {}

// Service applies the build rules on top of a Store (truth), Leases (ack TTLs) and a Queue.
type Service struct {
	store  Store
	leases Leases
	queue  Queue
	gate   TwoPhaseFlag
	cfg    Config
	now    func() time.Time
	log    *slog.Logger

	runners   *runnerCache
	touches   *recent.Map[time.Time] // build id → the last liveness write; also "running, as far as this replica knows"
	jobs      *jobCache
	wakes     *longpoll.Hub
	empties   *claimpacing.EmptyProfiles
	flights   *claimpacing.Flights
	queueFeed QueueFeed
	observer  Observer
	events    PipelineEvents
	audits    AuditLog
	hub       *longpoll.Watchers
	projects  ProjectReader
	// archiveRequests carries this replica's finishes to its log archive worker.
	archiveRequests chan int64
	// changes carries hints for live views; batch holds them until the next flush.
	changes ChangeFeed
	batch   changeBatch
	// live keeps the live tails of job logs (nil: every append goes to Postgres).
	live LiveTraces
	// leaseArm is leases and live when one store holds both (nil: two calls per ack).
	leaseArm LeaseArm
	// fallback paces claims made without the queue version; faults logs the hot path's
	// repeated faults once per interval.
	fallback *claimpacing.Fallback
	faults   *faultlog.Tally
}

// Observer is told about domain events worth a metric.
type Observer interface {
	Acknowledged(assignToAck time.Duration)
}

// Unobserved is the Observer of a service whose metrics nobody reads (tests, the bench's
// twin, which measures its own).
var Unobserved Observer = unobserved{}

type unobserved struct{}

func (unobserved) Acknowledged(time.Duration) {}

// Deps are what a Service is built from. Every role is required, as production gives
// each (server.ServiceDeps and the replica's Redis): NewService panics naming a missing
// one. A replica that runs without Redis's feeds on purpose says so with Standalone.
type Deps struct {
	Store  Store
	Leases Leases
	Queue  Queue
	// QueueFeed announces queue bumps between replicas, so that a long poll wakes only
	// who can take what changed (Standalone: every change wakes every held request); run
	// RunQueueFeed in the background. The store counts what a claim could take when it
	// is a ClaimCounter.
	QueueFeed QueueFeed
	// Events carries "pipeline changed" between replicas (Standalone: pipeline waiters
	// poll Postgres); run RunPipelineEvents in the background.
	Events PipelineEvents
	// TwoPhase decides whether a capable runner must ack (NeverTwoPhase: never).
	TwoPhase TwoPhaseFlag
	// Observer is told about events worth a metric (Unobserved: none).
	Observer Observer
	// Audit records operator actions and lists them.
	Audit AuditLog
	// Projects reads what jobs and new pipelines need of projects.
	Projects ProjectReader
	// Changes carries hints for live views between replicas (Standalone: none are sent);
	// run RunChangeFeed in the background.
	Changes ChangeFeed
	// Live keeps running jobs' logs in Redis (Standalone: in Postgres, a statement per
	// PATCH).
	Live   LiveTraces
	Config Config
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Log receives what the service cannot return (nil: discarded).
	Log *slog.Logger
}

// missing names the roles d leaves out.
func (d Deps) missing() []string {
	var m []string
	for _, r := range []struct {
		name string
		set  bool
	}{
		{"Store", d.Store != nil}, {"Leases", d.Leases != nil}, {"Queue", d.Queue != nil},
		{"QueueFeed", d.QueueFeed != nil}, {"Events", d.Events != nil}, {"TwoPhase", d.TwoPhase != nil},
		{"Observer", d.Observer != nil}, {"Audit", d.Audit != nil}, {"Projects", d.Projects != nil},
		{"Changes", d.Changes != nil}, {"Live", d.Live != nil},
	} {
		if !r.set {
			m = append(m, r.name)
		}
	}
	return m
}

// NewService wires the service; it panics when d misses a role (Deps).
func NewService(d Deps) *Service {
	if m := d.missing(); len(m) > 0 {
		panic(fmt.Sprintf("builds.NewService: Deps.%s required (Standalone, NeverTwoPhase and Unobserved name the modes without them)", strings.Join(m, ", Deps.")))
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	// Standalone's roles are carried out by the service itself (standalone.go).
	if d.QueueFeed == Standalone {
		d.QueueFeed = nil
	}
	if d.Events == Standalone {
		d.Events = nil
	}
	if d.Changes == Standalone {
		d.Changes = nil
	}
	if d.Live == Standalone {
		d.Live = nil
	}
	cfg := d.Config
	if cfg.TouchInterval == 0 {
		cfg.TouchInterval = time.Minute
	}
	if cfg.RunnerCacheTTL == 0 {
		cfg.RunnerCacheTTL = 5 * time.Second
	}
	if cfg.TraceChunkSize <= 0 {
		cfg.TraceChunkSize = DefaultTraceChunkSize
	}
	if cfg.LiveTraceCheck <= 0 {
		cfg.LiveTraceCheck = DefaultLiveTraceCheck
	}
	s := &Service{store: d.Store, leases: d.Leases, queue: d.Queue, gate: d.TwoPhase, cfg: cfg, now: d.Now, log: d.Log,
		observer: d.Observer, events: d.Events, audits: d.Audit, projects: d.Projects,
		changes: d.Changes,
		live:    d.Live, archiveRequests: make(chan int64, archiveRequestBuffer),
		batch:   changeBatch{pending: map[Change]struct{}{}},
		runners: newRunnerCache(cfg.RunnerCacheTTL), hub: longpoll.NewWatchers(), jobs: newJobCache(jobCacheSize),
		touches: recent.New[time.Time](jobCacheSize)}
	var counter ClaimCounter
	if c, ok := d.Store.(ClaimCounter); ok && d.QueueFeed != nil {
		counter = c
	}
	if la, ok := d.Leases.(LeaseArm); ok && d.Live != nil {
		if l, ok := d.Live.(LeaseArm); ok && l == la {
			s.leaseArm = la
		}
	}
	s.queueFeed = d.QueueFeed
	s.empties = claimpacing.NewEmptyProfiles()
	s.flights = claimpacing.NewFlights()
	s.fallback = claimpacing.NewFallback(cfg.FallbackClaims, cfg.LongPoll)
	s.faults = faultlog.NewTally(d.Log, "Redis did not answer in time; each fault fell back as docs/overload.md says", 0)
	s.wakes = longpoll.NewHub(d.Queue, counter, s.runners.forgetRunner, d.Log)
	return s
}

// archiveRequestBuffer is how many just-finished builds wait for this replica's archive
// worker; past it the background pass archives them.
const archiveRequestBuffer = 1024

// jobCacheSize is how many builds per generation jobCache and touches keep: a few minutes
// of a busy fleet's assignments, about 100 bytes each.
const jobCacheSize = 50_000

// Now is the service's clock (injectable for tests).
func (s *Service) Now() time.Time { return s.now() }

// Config returns the service configuration.
func (s *Service) Config() Config { return s.cfg }

// RegisterRunner creates a runner for actor and returns its token (shown once); the
// runner's TokenExpiresAt says when the token expires. r.RegistrationToken chooses the
// token's prefix.
func (s *Service) RegisterRunner(ctx context.Context, r Runner) (Runner, string, error) {
	token := s.NewRunnerToken(r)
	r.TokenExpiresAt = token.ExpiresAt
	created, err := s.store.CreateRunner(ctx, r, secrettoken.Hash(token.Token))
	if err != nil {
		return Runner{}, "", err
	}
	s.audit(ctx, "runner_created", runnerTarget(created.ID), RunnerAuditDetail(created))
	return created, token.Token, nil
}

// RunnerChanged forgets what this replica cached of runner id and bumps the queue version
// naming it: an operator changed its settings or token (package builds/runners), so no
// idle poll may be answered from an entry older than the change, and its held requests
// wake.
func (s *Service) RunnerChanged(ctx context.Context, id int64) {
	s.runners.forgetRunner(id)
	s.bumpRunner(ctx, id)
}

// authenticateRunner resolves a runner token, from memory when recently seen. An idle poll
// accepts an older entry (idleAuthTTL): see RequestJob.
func (s *Service) authenticateRunner(ctx context.Context, token string, idle bool) (Runner, error) {
	if len(token) < len(RunnerTokenPrefix)+8 || len(token) > 256 {
		return Runner{}, ErrRunnerForbidden
	}
	hash := secrettoken.Hash(token)
	now := s.now()
	r, ok := s.runners.get(hash, now, idle)
	if !ok {
		var err error
		r, err = s.store.RunnerByTokenHash(ctx, hash)
		if errors.Is(err, ErrNotFound) {
			return Runner{}, ErrRunnerForbidden
		}
		if err != nil {
			return Runner{}, err
		}
		s.runners.put(hash, r, now)
	}
	// Checked on every request, cached or not: an expired token is refused like an
	// unknown one, on every runner endpoint.
	if tokenExpired(r.TokenExpiresAt, now) {
		return Runner{}, fmt.Errorf("runner %d: token expired at %s: %w", r.ID, r.TokenExpiresAt.Format(time.RFC3339), ErrRunnerForbidden)
	}
	return r, nil
}

// manager returns the manager row id for (runner, system id), upserting at most once per
// minute per replica so that polls stay cheap.
func (s *Service) manager(ctx context.Context, r Runner, systemID string, info ManagerInfo) (int64, error) {
	if systemID == "" {
		systemID = "<legacy>"
	}
	now := s.now()
	if id, ok := s.runners.manager(r.ID, systemID, now); ok {
		return id, nil
	}
	m, err := s.upsertManager(ctx, r.ID, systemID, info, now)
	if err != nil {
		return 0, err
	}
	s.runners.putManager(r.ID, systemID, m.ID, now)
	return m.ID, nil
}

// VerifyRunner answers POST /runners/verify and records the manager.
func (s *Service) VerifyRunner(ctx context.Context, token, systemID string, info ManagerInfo) (Runner, error) {
	r, err := s.authenticateRunner(ctx, token, false)
	if err != nil {
		return Runner{}, err
	}
	if systemID == "" {
		systemID = "<legacy>"
	}
	m, err := s.upsertManager(ctx, r.ID, systemID, info, s.now())
	if err != nil {
		return Runner{}, err
	}
	s.runners.putManager(r.ID, systemID, m.ID, s.now())
	return r, nil
}

// upsertManager records a manager within the runner's cap.
func (s *Service) upsertManager(ctx context.Context, runnerID int64, systemID string, info ManagerInfo, now time.Time) (Manager, error) {
	m, err := s.store.UpsertManager(ctx, runnerID, systemID, info, now, s.cfg.MaxManagersPerRunner)
	if errors.Is(err, ErrTooManyManagers) {
		return Manager{}, &ManagerLimitError{RunnerID: runnerID, Max: s.cfg.MaxManagersPerRunner}
	}
	return m, err
}

// ackTTL is the TTL to grant now for a build assigned at assignedAt, never reaching past
// the max provisioning wait.
func (s *Service) ackTTL(assignedAt, now time.Time) time.Duration {
	ttl := s.cfg.AckTTL
	if s.cfg.MaxProvisioningWait > 0 {
		if left := assignedAt.Add(s.cfg.MaxProvisioningWait).Sub(now); left < ttl {
			ttl = left
		}
	}
	return ttl
}

func (s *Service) queueVersion(ctx context.Context) (string, error) {
	v, err := s.queue.Version(ctx)
	if err != nil {
		if ctx.Err() == nil {
			s.faults.Count(ctx, "queue_version_unavailable", err)
		}
		return "", err
	}
	return v, nil
}

// bumpQueue tells every runner to look in Postgres again. A failure is logged: runners then
// keep answering from their old version until the next bump, so retry once.
func (s *Service) bumpQueue(ctx context.Context) {
	for i := 0; i < 2; i++ {
		if err := s.queue.Bump(ctx); err == nil {
			return
		} else if i == 1 {
			s.log.WarnContext(ctx, "queue version not bumped; idle runners may see new builds late", "error", err)
		}
	}
}

// JobUpdate is a runner's PUT /jobs/:id.
type JobUpdate struct {
	ID            int64
	Token         string
	State         string
	FailureReason string
	ExitCode      *int64
	// Bytesize is the length of the log the runner holds (output.bytesize; 0: not sent).
	Bytesize int64
	// Admit, when set, is asked once whether the request may go on, as soon as the service
	// knows whether Token is the build's job token (valid): the HTTP layer's rate limits,
	// which count wrong tokens per client and right ones per job. Its error is the answer;
	// an invalid token it lets through is answered 403. It is asked before anything
	// changes, except for the ack of a build this replica does not know: that ack's
	// compare-and-set carries the token, so the ack itself is the check, and Admit is told
	// afterwards; its refusal is not the answer then, as the ack took place (an ack comes
	// once per build; a 429 would only make the runner send it again, to a running build).
	Admit func(ctx context.Context, valid bool) error
}

// Runner-reported states.
const (
	StatePending = "pending"
	StateRunning = "running"
	StateSuccess = "success"
	StateFailed  = "failed"
)

// UpdateJob applies SPEC §4's PUT table and returns the build's state for Job-Status.
func (s *Service) UpdateJob(ctx context.Context, u JobUpdate) (Status, error) {
	bad := validateUpdate(u)
	gate := &admission{u: u}
	if bad != nil && u.Admit == nil {
		return "", bad
	}
	if err := s.checkUpdateToken(ctx, u, gate, bad != nil); err != nil {
		return "", err
	}
	if bad != nil {
		// The token's check and its rate limits come first, as they did when the HTTP
		// layer applied them before the body was looked at.
		return "", bad
	}
	if st, ok, err := s.updateFast(ctx, u, gate); ok {
		return st, err
	}
	// A compare-and-set that loses re-reads and decides again; five rounds are plenty, as
	// each loss means the build moved one step towards an end state.
	for round := 0; round < 5; round++ {
		b, err := s.jobForToken(ctx, u.ID, u.Token)
		var jf *JobForbiddenError
		if errors.As(err, &jf) && jf.Cause == InvalidJobToken {
			if err := gate.admit(ctx, false); err != nil {
				return "", err
			}
		}
		if err != nil {
			return "", err
		}
		if err := gate.admit(ctx, true); err != nil {
			return "", err
		}
		st, err := s.applyUpdate(ctx, b, u)
		if errors.Is(err, ErrConflict) {
			continue
		}
		return st, err
	}
	return "", fmt.Errorf("update build %d: %w", u.ID, ErrConflict)
}

// validateUpdate checks what a PUT says, before any state is looked at.
func validateUpdate(u JobUpdate) error {
	if u.Bytesize < 0 {
		return invalid("output.bytesize must not be negative, got %d", u.Bytesize)
	}
	switch u.State {
	case StatePending, StateRunning, StateSuccess, StateFailed:
	default:
		return invalid("state must be one of pending, running, success, failed; got %.40q", u.State)
	}
	if u.FailureReason != "" && !ValidFailureReason(u.FailureReason) {
		return invalid("unknown failure_reason %.40q", u.FailureReason)
	}
	return nil
}

// checkUpdateToken checks u's token before the update where that costs no statement (a
// token no build can have, a build this replica knows) or where the update needs it
// (rate limits with a request that is no ack, or one refused anyway: bad). Otherwise,
// an ack of a build this replica does not know, the ack's compare-and-set is the check
// (see JobUpdate.Admit), and the full path's read when that finds nothing.
func (s *Service) checkUpdateToken(ctx context.Context, u JobUpdate, gate *admission, bad bool) error {
	if u.Token == "" || len(u.Token) > 256 {
		return gate.admit(ctx, false) // no build has such a token: refused without Postgres
	}
	if known, match := s.jobs.check(u.ID, u.Token); known {
		return gate.admit(ctx, match)
	}
	if u.Admit == nil || u.State == StateRunning && !bad {
		return nil
	}
	// A final update or a keep-alive changes the build in its first statement, so the rate
	// limits must see its token's check before it (and the read remembers the build for
	// its trace PATCHes).
	valid, err := s.JobTokenValid(ctx, u.ID, u.Token)
	if err != nil {
		return err
	}
	return gate.admit(ctx, valid)
}

// admission asks a JobUpdate's Admit at most once per request.
type admission struct {
	u     JobUpdate
	asked bool
	err   error
}

// admit returns the answer for a request whose token is (not) valid: Admit's error, else
// a 403 for an invalid token, else nil. Only the first call asks Admit.
func (a *admission) admit(ctx context.Context, valid bool) error {
	if !a.asked {
		a.asked = true
		if a.u.Admit != nil {
			a.err = a.u.Admit(ctx, valid)
		}
	}
	if a.err != nil {
		return a.err
	}
	if !valid {
		return &JobForbiddenError{Cause: InvalidJobToken}
	}
	return nil
}

// updateFast tries the two transitions that make up nearly every runner PUT, an ack of a
// waiting build and the final update of a running one, as one compare-and-set that carries
// the job token, without reading the build first. ok=false means the build is in another
// state or the token is wrong: the caller then reads the build and applies the full table,
// which also finds the right answer (403, an idempotent repeat, a cancel) for those cases.
func (s *Service) updateFast(ctx context.Context, u JobUpdate, gate *admission) (st Status, ok bool, err error) {
	hash := secrettoken.Hash(u.Token)
	now := s.now()
	switch u.State {
	case StateRunning:
		if _, running := s.touches.Get(u.ID); running {
			return "", false, nil // running already, as this replica knows: a keepalive
		}
		// A replica that did not assign the build knows nothing of it (behind a load
		// balancer, the common case): the ack's own statement returns what it keeps.
		acked, err := s.store.Acknowledge(ctx, Ack{ID: u.ID, TokenHash: hash, Now: now, ReadMasked: !s.jobs.known(u.ID)})
		if errors.Is(err, ErrConflict) {
			return "", false, nil
		}
		if err != nil {
			return "", true, err
		}
		// The compare-and-set matched the token: the rate limits count a valid one. The
		// build is running now whatever they say (see JobUpdate.Admit).
		_ = gate.admit(ctx, true)
		s.acknowledged(ctx, u.ID, hash, acked, now)
		return StatusRunning, true, nil
	case StatePending:
		if _, running := s.touches.Get(u.ID); running {
			return "", false, nil // running already, as this replica knows: a liveness touch
		}
		// The token was checked before when rate limits ask (checkUpdateToken); the
		// compare-and-set carries it anyway. A build past its max wait, not waiting, or not
		// this token's: the full path reads it and says which.
		kept, err := s.store.KeepAlive(ctx, KeepAlive{ID: u.ID, TokenHash: hash, Now: now,
			TTL: s.cfg.AckTTL, MaxWait: s.cfg.MaxProvisioningWait})
		if errors.Is(err, ErrConflict) {
			return "", false, nil
		}
		if err != nil {
			return "", true, err
		}
		s.keptAlive(ctx, u.ID, kept, now)
		return StatusWaiting, true, nil
	case StateSuccess, StateFailed:
		if u.Bytesize > 0 && !s.liveCovers(ctx, u) {
			return "", false, nil // the full path compares with the durable size too
		}
		st, err := s.finishFromRunner(ctx, Build{ID: u.ID, Status: StatusRunning}, u, now, hash)
		if errors.Is(err, ErrConflict) {
			return "", false, nil
		}
		return st, true, err
	}
	return "", false, nil
}

// finalState maps a runner's final update of a running build to the build's end state.
func finalState(u JobUpdate) (Status, string) {
	if u.State != StateFailed {
		return StatusSuccess, ""
	}
	if u.FailureReason == "" {
		return StatusFailed, ReasonUnknownFailure
	}
	return StatusFailed, u.FailureReason
}

// forgetJob drops what this replica keeps about a build that left its runner.
func (s *Service) forgetJob(id int64) {
	s.touches.Forget(id)
	s.jobs.forget(id)
}

// JobTokenValid reports whether token is build id's job token, without changing anything:
// the HTTP layer asks it before spending the job's rate-limit budget, so that requests with
// a wrong token (job ids are sequential, easy to guess) cannot exhaust the real runner's.
// A build this replica assigned or served is checked in memory; another costs one read,
// after which it is remembered while on a runner.
func (s *Service) JobTokenValid(ctx context.Context, id int64, token string) (bool, error) {
	if token == "" || len(token) > 256 {
		return false, nil
	}
	if known, match := s.jobs.check(id, token); known {
		return match, nil
	}
	b, err := s.store.Build(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !secrettoken.Matches(token, b.TokenHash) {
		return false, nil
	}
	if b.Status.OnRunner() {
		// The entry also serves trace masking, so it holds the project's masked values too.
		project, err := s.jobProject(ctx, b.ProjectID)
		if err != nil {
			return false, fmt.Errorf("read project %d of build %d: %w", b.ProjectID, b.ID, err)
		}
		s.jobs.put(b, b.TokenHash, project.maskedVariables())
	}
	return true, nil
}

// jobForToken loads a build and checks the presented job token against it: the fence.
func (s *Service) jobForToken(ctx context.Context, id int64, token string) (Build, error) {
	b, err := s.store.Build(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Build{}, &JobForbiddenError{Cause: InvalidJobToken}
	}
	if err != nil {
		return Build{}, err
	}
	if !secrettoken.Matches(token, b.TokenHash) {
		return Build{}, &JobForbiddenError{Cause: InvalidJobToken}
	}
	return b, nil
}

func (s *Service) applyUpdate(ctx context.Context, b Build, u JobUpdate) (Status, error) {
	now := s.now()
	switch b.Status {
	case StatusWaiting:
		switch u.State {
		case StateRunning:
			return s.acknowledge(ctx, b, now)
		case StatePending:
			return s.keepalive(ctx, b, now)
		case StateFailed:
			return s.decline(ctx, b, u, now)
		default:
			return "", invalid("a job waiting for its acknowledgement cannot succeed: send state=running first")
		}
	case StatusRunning, StatusCanceling:
		switch u.State {
		case StateRunning, StatePending:
			s.touch(ctx, b, now)
			return b.Status, nil
		default:
			if err := s.checkFinalLog(ctx, b, u); err != nil {
				return "", err
			}
			return s.finishFromRunner(ctx, b, u, now, nil)
		}
	}
	if b.Status.Finished() && b.RunnerFinalState != "" && b.RunnerFinalState == u.State {
		// The runner lost our answer to its final update and sent it again.
		return b.Status, nil
	}
	return "", &JobForbiddenError{Cause: NotProcessing, Status: b.Status}
}

func (s *Service) acknowledge(ctx context.Context, b Build, now time.Time) (Status, error) {
	acked, err := s.store.Acknowledge(ctx, Ack{ID: b.ID, TokenHash: b.TokenHash, Now: now, ReadMasked: !s.jobs.known(b.ID)})
	if err != nil {
		return "", err
	}
	s.acknowledged(ctx, b.ID, b.TokenHash, acked, now)
	return StatusRunning, nil
}

// acknowledged follows a successful ack. Only then: an ack that lost the row to the sweeper
// (ErrConflict) is no acknowledgement.
func (s *Service) acknowledged(ctx context.Context, id int64, tokenHash []byte, acked Acked, now time.Time) {
	if m := acked.Masked; m != nil {
		// What the runner's trace PATCHes to this replica need, as a claim here would have
		// left it (an implicit project, or none kept, masks nothing of its own).
		b := Build{ID: id, PipelineID: acked.PipelineID, StageIdx: acked.StageIdx, Payload: Payload{Variables: m.Variables}}
		s.jobs.put(b, tokenHash, m.Project)
	}
	s.touches.Put(id, now) // the ack wrote updated_at; later PUTs with state=running are keepalives
	s.changed(Change{PipelineID: acked.PipelineID, BuildID: id})
	if !acked.AssignedAt.IsZero() {
		s.observer.Acknowledged(now.Sub(acked.AssignedAt))
	}
	// Both Redis writes are harmless to lose: the build is running in Postgres and the
	// sweeper only looks at waiting builds, so the ack key expires on its own; a live log
	// not armed makes the first PATCH check Postgres.
	if s.leaseArm != nil {
		if _, err := s.leaseArm.ReleaseArm(ctx, id, StatusRunning, acked.TraceSize, s.firstLiveCheck(now)); err != nil {
			s.faults.Count(ctx, "ack_key_not_deleted_and_live_trace_not_armed", err)
		}
		return
	}
	s.armLive(ctx, id, acked.TraceSize, now)
	if err := s.leases.Release(ctx, id); err != nil {
		s.faults.Count(ctx, "ack_key_not_deleted", err)
	}
}

// keepalive is the full path's keep-alive of b, read waiting: the same compare-and-set as
// updateFast's, with the TTL capped here from b's assignment.
func (s *Service) keepalive(ctx context.Context, b Build, now time.Time) (Status, error) {
	assignedAt := now
	if b.AssignedAt != nil {
		assignedAt = *b.AssignedAt
	}
	ttl := s.ackTTL(assignedAt, now)
	if ttl <= 0 {
		// Past the max provisioning wait: the sweeper fails it; tell the runner now.
		return "", &JobForbiddenError{Cause: ProvisioningTimedOut, Status: b.Status}
	}
	kept, err := s.store.KeepAlive(ctx, KeepAlive{ID: b.ID, TokenHash: b.TokenHash, Now: now, TTL: ttl})
	if err != nil {
		// ErrConflict: the build left waiting since it was read (the sweeper failed it, an
		// operator canceled it); UpdateJob reads it again and answers 403 with its state.
		// The statement waited for that change's commit, so the new read sees it.
		return "", err
	}
	s.keptAlive(ctx, b.ID, kept, now)
	return StatusWaiting, nil
}

// keptAlive follows a keep-alive that Postgres took: its deadline of record moved, and
// the ack key follows it. The key is what the sweeper asks for a build whose deadline of
// record passed; one not refreshed only means the sweeper fails the build at the new
// deadline of record unless it is kept alive or acked again, which is what the runner
// was promised, so a Redis failure here does not change the answer.
func (s *Service) keptAlive(ctx context.Context, id int64, kept KeptAlive, now time.Time) {
	if ttl := kept.Deadline.Sub(now); ttl > 0 {
		if err := s.leases.Refresh(ctx, id, strconv.FormatInt(kept.RunnerManagerID, 10), ttl); err != nil {
			s.faults.Count(ctx, "ack_key_not_refreshed", err)
		}
	}
	s.changed(Change{PipelineID: kept.PipelineID, BuildID: id})
}

func (s *Service) decline(ctx context.Context, b Build, u JobUpdate, now time.Time) (Status, error) {
	reason := u.FailureReason
	if reason == "" {
		reason = ReasonRunnerSystemFailure
	}
	f, err := s.finish(ctx, Finish{
		BuildID: b.ID, From: []Status{StatusWaiting}, To: StatusFailed, Reason: reason, ExitCode: u.ExitCode,
		RunnerFinalState: u.State, Event: EventDeclined, RunnerManager: b.RunnerSystemID, Now: now,
		Policy: &s.cfg.Policy, AlsoRetryAs: ReasonRunnerProvisioningTimeout,
	})
	if err != nil {
		return "", err
	}
	if err := s.leases.Release(ctx, b.ID); err != nil {
		s.faults.Count(ctx, "ack_key_not_deleted", err)
	}
	return f.Build.Status, nil
}

// finishFromRunner applies a runner's final update to b, from the state b was read in. With
// tokenHash set, b need only hold its id and state: the job token is then part of the
// compare-and-set, and the event's runner manager comes from the row (see Finish).
func (s *Service) finishFromRunner(ctx context.Context, b Build, u JobUpdate, now time.Time, tokenHash []byte) (Status, error) {
	to, reason := finalState(u)
	if b.Status == StatusCanceling {
		to, reason = StatusCanceled, ""
	}
	f, err := s.finish(ctx, Finish{
		BuildID: b.ID, From: []Status{b.Status}, To: to, Reason: reason, ExitCode: u.ExitCode,
		RunnerFinalState: u.State, Event: EventFinished, RunnerManager: b.RunnerSystemID, Now: now,
		Policy: &s.cfg.Policy, TokenHash: tokenHash, Flush: s.flushBeforeFinish(ctx, b.ID),
	})
	if err != nil {
		return "", err
	}
	s.forgetJob(b.ID)
	return f.Build.Status, nil
}

// finish runs a Finish and bumps the queue when builds became pending.
func (s *Service) finish(ctx context.Context, f Finish) (Finished, error) {
	s.liveFence(ctx, f)
	res, err := s.store.Finish(ctx, f)
	if err != nil {
		// A failed finish leaves the tail closing: the build's appends go to Postgres,
		// correct and a statement each, until it ends. Bytes it was to flush stay live.
		return Finished{}, err
	}
	if f.Flush != nil {
		s.liveTrim(ctx, res.Build.ID, f.Flush.Offset, res.Build.TraceSize)
	}
	if slices.ContainsFunc(f.From, Status.OnRunnerLog) {
		s.liveClose(ctx, res.Build.ID, res.Build.Status)
	}
	if res.Queued {
		s.bumpQueue(ctx)
	}
	if res.Build.Status.Finished() {
		s.requestTraceArchive(res.Build.ID)
	}
	s.notifyPipelines(ctx, res.Build.PipelineID)
	s.changed(Change{PipelineID: res.Build.PipelineID, BuildID: res.Build.ID})
	if res.CancelPipeline {
		s.cancelOnJobFailure(ctx, res.Build)
	}
	return res, nil
}

// touch records liveness at most once per TouchInterval per build on this replica.
func (s *Service) touch(ctx context.Context, b Build, now time.Time) {
	if last, ok := s.touches.Get(b.ID); ok && now.Sub(last) < s.cfg.TouchInterval {
		return
	}
	if now.Sub(b.UpdatedAt) < s.cfg.TouchInterval {
		s.touches.Put(b.ID, b.UpdatedAt)
		return
	}
	if err := s.store.Touch(ctx, b.ID, now); err != nil {
		s.log.WarnContext(ctx, "liveness not recorded", "build_id", b.ID, "error", err)
		return
	}
	s.touches.Put(b.ID, now)
}

// traceLimitSlack lets a runner configured with the same limit finish: gitlab-runner writes
// until its log is over its output_limit, then appends a "log exceeded limit" notice.
const traceLimitSlack = 64 << 10

// TraceResult is the answer to a trace PATCH.
type TraceResult struct {
	Size   int64
	Status Status
}

// AppendTrace applies a runner's PATCH /jobs/:id/trace. With a live trace (see
// livetrace.go) a PATCH of a build this replica knows is one Redis call and no Postgres
// statement; without one, it is one Postgres statement.
func (s *Service) AppendTrace(ctx context.Context, id int64, token string, offset int64, data []byte) (TraceResult, error) {
	job, ok := s.jobs.get(id, token)
	if !ok || s.overTraceLimit(offset, data) || (len(data) == 0 && s.live == nil) {
		return s.appendTraceRead(ctx, id, token, offset, data)
	}
	// Known build, right token: no read first.
	masked := maskSecrets(data, job.vars, token)
	if s.live != nil {
		return s.appendLive(ctx, id, offset, masked)
	}
	res, err := s.appendDurable(ctx, id, offset, masked)
	var jf *JobForbiddenError
	if errors.As(err, &jf) {
		// Not on a runner any more: the full path below says why.
		return s.appendTraceRead(ctx, id, token, offset, data)
	}
	return res, err
}

// appendTraceRead is AppendTrace for a build read from Postgres first: one this replica
// does not know yet, or a chunk over the size limit.
func (s *Service) appendTraceRead(ctx context.Context, id int64, token string, offset int64, data []byte) (TraceResult, error) {
	b, err := s.jobForToken(ctx, id, token)
	if err != nil {
		return TraceResult{}, err
	}
	if !b.Status.OnRunnerLog() {
		return TraceResult{}, &JobForbiddenError{Cause: NotRunning, Status: b.Status}
	}
	project, err := s.jobProject(ctx, b.ProjectID)
	if err != nil {
		return TraceResult{}, fmt.Errorf("read project %d of build %d: %w", b.ProjectID, b.ID, err)
	}
	masked := project.maskedVariables()
	s.jobs.put(b, b.TokenHash, masked)
	now := s.now()
	if s.overTraceLimit(offset, data) {
		f, err := s.finish(ctx, Finish{
			BuildID: b.ID, From: []Status{b.Status}, To: StatusFailed, Reason: ReasonTraceSizeExceeded,
			Event: EventTraceExceeded, RunnerManager: b.RunnerSystemID, Now: now, Policy: &s.cfg.Policy,
			Detail: map[string]any{"limit_bytes": s.cfg.TraceLimit}, Flush: s.flushBeforeFinish(ctx, b.ID),
		})
		if errors.Is(err, ErrConflict) {
			return s.AppendTrace(ctx, id, token, offset, data)
		}
		if err != nil {
			return TraceResult{}, err
		}
		s.forgetJob(b.ID)
		return TraceResult{}, &JobForbiddenError{Cause: TraceTooLarge, Status: f.Build.Status}
	}
	vars := slices.Concat(masked, b.Payload.Variables)
	if s.live != nil {
		// The Lua call checks the offset against the live size, which Postgres's trace_size
		// need not know.
		return s.appendLive(ctx, b.ID, offset, maskSecrets(data, vars, token))
	}
	if offset != b.TraceSize {
		return TraceResult{Size: b.TraceSize, Status: b.Status}, &TraceRangeError{Size: b.TraceSize}
	}
	if len(data) == 0 {
		// Nothing to append (GitLab answers the current length). A stored empty chunk would
		// hold the offset the next real chunk needs, failing every later append.
		return TraceResult{Size: b.TraceSize, Status: b.Status}, nil
	}
	res, err := s.appendDurable(ctx, b.ID, offset, maskSecrets(data, vars, token))
	var jf *JobForbiddenError
	if errors.As(err, &jf) {
		// The build left running between our read and the append: answer from its new state.
		return s.AppendTrace(ctx, id, token, offset, data)
	}
	return res, err
}

func (s *Service) overTraceLimit(offset int64, data []byte) bool {
	return s.cfg.TraceLimit > 0 && offset+int64(len(data)) > s.cfg.TraceLimit+traceLimitSlack
}
