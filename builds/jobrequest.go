package builds

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/jobapi/jobapi/builds/claimpacing"
	"github.com/jobapi/jobapi/builds/longpoll"
	"github.com/jobapi/jobapi/secrettoken"
)

// JobRequest is a runner's POST /jobs/request.
type JobRequest struct {
	Token      string
	SystemID   string
	LastUpdate string
	Info       ManagerInfo
	// TwoPhaseCapable: info.features.two_phase_job_commit.
	TwoPhaseCapable bool
	// Detach, when set, lets the long poll and the fallback hold the request without its
	// goroutine.
	Detach Detacher
	// detached: Detach returned true already (the request runs on a callback).
	detached bool
}

// Detacher is a request that can leave its goroutine while the long poll holds it (handlers:
// an HTTP/1.1 connection taken from net/http). Once Detach returns true, RequestJob returns
// ErrDetached and the request is answered through Finish, exactly once, on whichever
// goroutine ends it.
type Detacher interface {
	// Detach takes the request off its goroutine; false leaves it there, held by Wait.
	Detach() bool
	// Context is what the rest of the request runs under once woken: its own context ended
	// with its handler.
	Context() context.Context
	// Alive reports whether the client still waits for the answer; a claim for one that does
	// not would hand out a build nobody receives.
	Alive() bool
	// Finish answers the request with what RequestJob would have returned.
	Finish(a *Assignment, err error)
}

// ErrDetached: the request left its goroutine (JobRequest.Detach) and is answered through
// its Detacher.
var ErrDetached = errors.New("job request held without its goroutine")

// errClientGone is what Finish gets for a woken request whose client no longer waits.
var errClientGone = fmt.Errorf("job request's client gone: %w", context.Canceled)

// Assignment is a build handed to a runner, with the job token issued for it.
type Assignment struct {
	Build      Build
	JobToken   string
	LastUpdate string
	// Runner took the build; Project is its project as of the assignment.
	Runner  Runner
	Project JobProject
	// Pipeline and Dependencies: what the payload needs of the build's pipeline.
	Pipeline     JobPipeline
	Dependencies []Dependency
}

// RequestJob hands out the oldest matching build, or returns *NoJobError. Its steps, in
// the order a request meets them (each one below, in that order):
//
//  1. pollOf: the queue version the runner echoes says how fresh its runner must be.
//  2. activeRunner: the runner behind the token, 204 when it is paused.
//  3. takeTurn, after a bump: a profile known to be empty at this version is answered 204,
//     and claims of one profile go in flights (claimpacing.Flights).
//  4. holdIdle, when nothing changed: the long poll holds the request until a change
//     may have a build for this runner, off its goroutine when the request allows
//     (JobRequest.Detach: RequestJob then returns ErrDetached and answers it later).
//  5. fallback.enter, when the queue version could not be read: the claims of a profile are
//     paced and answer the polls queued before them (claimpacing.Fallback).
//  6. prepareClaim: the manager, a new job token, the ack deadline, and decideTwoPhase.
//  7. claim: the store's claim; nothingClaimed when it finds no build.
//  8. handOut: the build's project, this replica's caches, the ack lease.
//
// The claim flight's slot and the long poll's held request are told how the request
// ended when it returns.
func (s *Service) RequestJob(ctx context.Context, req JobRequest) (_ *Assignment, err error) {
	version, verr := s.queueVersion(ctx)
	p := pollOf(version, verr, req.LastUpdate, s.wakes.FeedLive)
	r, err := s.activeRunner(ctx, req.Token, p.cachedRunner(), p.version)
	if err != nil {
		return nil, err
	}
	var slot *claimpacing.FlightSlot
	defer func() { slot.Done(claimOutcome(ctx, err)) }()
	if p.takesTurn() {
		if r, slot, err = s.takeTurn(ctx, req.Token, p, r); err != nil {
			return nil, err
		}
	}
	if p.idle {
		return s.holdIdle(ctx, &req, r, p.version)
	}
	return s.claimPaced(ctx, &req, r, p.version, slot, longpoll.HeldRequest{})
}

// claimPaced makes r's claim at version, or when the version could not be read (""), in
// the fallback's pace: a claim of this profile answers the polls queued before it
// (claimpacing.Fallback), so a slow Redis does not turn every poll into a claim; one that
// answers this poll answers 204 without a version. A request that can leave its goroutine
// waits for its turn without it (parkFallback: ErrDetached), and is then told held's
// outcome.
func (s *Service) claimPaced(ctx context.Context, req *JobRequest, r Runner, version string, slot *claimpacing.FlightSlot, held longpoll.HeldRequest) (_ *Assignment, err error) {
	if version == "" {
		if d := req.Detach; d != nil && (req.detached || d.Detach()) {
			s.parkFallback(*req, r, held)
			return nil, ErrDetached
		}
		var fb *claimpacing.FallbackSlot
		var answered bool
		if fb, answered, err = s.fallback.Enter(ctx, profileKey(r)); err != nil {
			return nil, err
		}
		if answered {
			return nil, &NoJobError{}
		}
		defer func() { fb.Done(fallbackOutcomeOf(ctx, err)) }()
	}
	return s.claimFor(ctx, req, r, version, slot)
}

// claimFor makes r's claim at version and hands out what it took (steps 6 to 8).
//
// It is its own frame, never inlined, and the assignment travels by pointer, because a
// request the long poll or the fallback holds keeps every frame below the hold on its
// goroutine's stack: with the claim's values (the claim, the claimed build, the
// assignment: some 4 KB) in RequestJob's frame, and the assignment in the handler's, a held
// request used about 14 KB of stack, which the runtime cannot shrink below 32 KB; 10,000
// held runners then held 450 MB of stacks.
//
//go:noinline
func (s *Service) claimFor(ctx context.Context, req *JobRequest, r Runner, version string, slot *claimpacing.FlightSlot) (*Assignment, error) {
	c, err := s.prepareClaim(ctx, *req, r)
	if err != nil {
		return nil, err
	}
	claimed, err := s.claim(ctx, c)
	if errors.Is(err, ErrNoBuild) {
		return nil, s.nothingClaimed(r, version, slot)
	}
	if err != nil {
		return nil, err
	}
	return s.handOut(ctx, c, claimed, version)
}

// poll is what a job request has seen of the queue, which decides how fresh the runner it
// answers for must be.
type poll struct {
	// version is the queue's version now; "" when it could not be read, and then the
	// request claims in Postgres, paced with the others that could not (claimpacing.Fallback).
	version string
	// idle: the runner echoes the current version. Its answer, 204, needs only a known
	// token, and every runner change bumps the version, so it may use an older cached
	// runner: an idle fleet then costs Postgres nothing, instead of one lookup per runner
	// per RunnerCacheTTL.
	idle bool
	// recorded: a poll after a bump may find its profile answered empty at this version
	// already (claimpacing.EmptyProfiles): that answer, too, may use an older cached runner while the
	// queue feed is live, as every replica drops a runner's copy when a change names it.
	recorded bool
}

// pollOf classifies a request that echoes lastUpdate when the queue is at version (or
// could not be read: versionErr). feedLive is asked only for a poll after a bump.
func pollOf(version string, versionErr error, lastUpdate string, feedLive func() bool) poll {
	idle := versionErr == nil && version != "" && lastUpdate == version
	recorded := !idle && versionErr == nil && version != "" && feedLive()
	return poll{version: version, idle: idle, recorded: recorded}
}

// cachedRunner: the request's first answer may come from an older cached runner.
func (p poll) cachedRunner() bool { return p.idle || p.recorded }

// takesTurn: a poll after a bump, which claims in its profile's flight at this version.
func (p poll) takesTurn() bool { return !p.idle && p.version != "" }

// noJob is the 204 of this poll.
func (p poll) noJob() error { return &NoJobError{LastUpdate: p.version} }

// activeRunner is the runner of token, from memory when cached allows an older copy; a
// paused runner gets no job: a *NoJobError with version.
func (s *Service) activeRunner(ctx context.Context, token string, cached bool, version string) (Runner, error) {
	r, err := s.authenticateRunner(ctx, token, cached)
	if err != nil {
		return Runner{}, err
	}
	if r.Paused {
		return Runner{}, &NoJobError{LastUpdate: version}
	}
	return r, nil
}

// takeTurn waits, after a bump, for r's profile's claim in flight at this version, if any
// (claimpacing.Flights), unless the profile is known to be empty at this version
// (claimpacing.EmptyProfiles):
// both answer 204 without a claim. It returns the runner to claim for, read afresh when
// the poll took a cached one, and the slot through which the claim hands the turn on; the
// caller reports on the slot, which is set even when an error comes with it.
func (s *Service) takeTurn(ctx context.Context, token string, p poll, r Runner) (Runner, *claimpacing.FlightSlot, error) {
	key := profileKey(r)
	if p.recorded && s.empties.Empty(key, p.version) {
		return r, nil, p.noJob()
	}
	slot, empty, err := s.flights.Enter(ctx, key, p.version)
	if err != nil {
		return r, slot, err
	}
	if empty {
		return r, slot, p.noJob()
	}
	if !p.recorded {
		return r, slot, nil
	}
	// The claim takes the runner as fresh as a claim always does.
	fresh, err := s.activeRunner(ctx, token, false, p.version)
	if err != nil {
		return r, slot, err
	}
	if profileKey(fresh) != key {
		// Retagged: its turn was for a profile it no longer has.
		slot.Done(claimpacing.FlightAbandoned)
		slot = nil
	}
	return fresh, slot, nil
}

// holdIdle answers a poll that saw the current version: nothing changed since this runner
// last found nothing, so it is answered without Postgres, after holding the request for
// the long poll if one is configured, off its goroutine when it can leave it (req.Detach).
func (s *Service) holdIdle(ctx context.Context, req *JobRequest, r Runner, version string) (*Assignment, error) {
	if s.cfg.LongPoll <= 0 {
		return nil, &NoJobError{LastUpdate: version}
	}
	profile := longpoll.Profile{Key: profileKey(r), Tags: r.Tags, RunUntagged: r.RunUntagged, ProtectedOnly: r.ProtectedOnly()}
	if d := req.Detach; d != nil && (req.detached || d.Detach()) {
		s.park(*req, r.ID, profile, version)
		return nil, ErrDetached
	}
	woken, held := s.wakes.Wait(ctx, r.ID, profile, version, s.cfg.LongPoll)
	if !woken {
		return nil, &NoJobError{LastUpdate: version}
	}
	return s.claimWoken(ctx, req, held)
}

// park holds a detached request in the hub; the hub's callback claims once it is woken
// and answers through the Detacher either way.
func (s *Service) park(req JobRequest, runnerID int64, profile longpoll.Profile, version string) {
	d := req.Detach
	req.detached = true
	s.wakes.Park(runnerID, profile, version, s.cfg.LongPoll, func(woken bool, held longpoll.HeldRequest) {
		switch {
		case !woken:
			d.Finish(nil, &NoJobError{LastUpdate: version})
		case !d.Alive():
			held.Gone() // someone else must take what it was woken for
			d.Finish(nil, errClientGone)
		default:
			ctx, cancel := context.WithTimeout(d.Context(), detachedClaimTimeout)
			a, err := s.claimWokenRecovered(ctx, &req, held)
			cancel()
			if errors.Is(err, ErrDetached) {
				return // waiting for its fallback turn, which answers it
			}
			d.Finish(a, err)
		}
	})
}

// parkFallback waits, detached, for r's turn in the fallback (claimpacing.Fallback.Park),
// then claims, answers through the Detacher, and tells held how the claim ended.
func (s *Service) parkFallback(req JobRequest, r Runner, held longpoll.HeldRequest) {
	d := req.Detach
	req.detached = true
	s.fallback.Park(profileKey(r), func(fb *claimpacing.FallbackSlot, empty bool, err error) {
		var a *Assignment
		switch {
		case err != nil:
		case empty:
			err = &NoJobError{}
		case !d.Alive():
			fb.Done(claimpacing.FallbackAbandoned)
			err = errClientGone
		default:
			ctx, cancel := context.WithTimeout(d.Context(), detachedClaimTimeout)
			a, err = s.claimForRecovered(ctx, &req, r)
			fb.Done(fallbackOutcomeOf(ctx, err))
			cancel()
		}
		held.Done(err == nil)
		d.Finish(a, err)
	})
}

// claimForRecovered is claimFor without a version for a detached request (see
// claimWokenRecovered).
func (s *Service) claimForRecovered(ctx context.Context, req *JobRequest, r Runner) (a *Assignment, err error) {
	defer s.recoverClaim(ctx, &a, &err)
	return s.claimFor(ctx, req, r, "", nil)
}

// recoverClaim turns a panic in a detached request's claim, whose goroutine has no HTTP
// middleware to recover it, into a logged error.
func (s *Service) recoverClaim(ctx context.Context, a **Assignment, err *error) {
	if v := recover(); v != nil {
		s.log.ErrorContext(ctx, "panic claiming for a held job request", "panic", v, "stack", string(debug.Stack()))
		*a, *err = nil, fmt.Errorf("panic claiming for a held job request: %v", v)
	}
}

// claimWokenRecovered is claimWoken for a detached request, whose goroutine has no HTTP
// middleware to recover a panic: the panic is logged and answered as an error.
func (s *Service) claimWokenRecovered(ctx context.Context, req *JobRequest, held longpoll.HeldRequest) (a *Assignment, err error) {
	defer s.recoverClaim(ctx, &a, &err)
	return s.claimWoken(ctx, req, held)
}

// detachedClaimTimeout bounds the claim of a woken detached request, which has no client
// context to end it: the statements it makes have timeouts of their own, this is the net.
const detachedClaimTimeout = time.Minute

// claimWoken claims for a held request that a change woke: the runner read afresh (what
// changed may be this runner: paused, retagged) at the version now ("" if it could not be
// read). The hub learns whether the wake-up found its build (if not, it counts again).
//
//go:noinline
func (s *Service) claimWoken(ctx context.Context, req *JobRequest, held longpoll.HeldRequest) (_ *Assignment, err error) {
	defer func() {
		if !errors.Is(err, ErrDetached) { // else its fallback turn tells held
			held.Done(err == nil)
		}
	}()
	version := ""
	if !req.detached || s.wakes.FeedLive() {
		// A detached request woken while the queue's subscription is down (the hub then
		// wakes everyone) goes to the fallback without reading: under a slow Redis the read
		// would only time out, and thousands of woken requests would wait for it at once.
		var verr error
		if version, verr = s.queueVersion(ctx); verr != nil {
			version = ""
		}
	}
	r, err := s.activeRunner(ctx, req.Token, false, version)
	if err != nil {
		return nil, err
	}
	return s.claimPaced(ctx, req, r, version, nil, held)
}

// pendingClaim is a claim about to be made, with what it needs beyond the store's Claim.
type pendingClaim struct {
	Claim
	// jobToken is the new job token, whose hash the claim stores.
	jobToken string
	// decided: the flag answered for a build of every project (Claim.WaitForAck), an
	// answer counted once a build is assigned by it.
	decided bool
}

// prepareClaim records the runner's manager and makes its claim: a new job token, the
// ack deadline from now, and how it decides between two-phase and legacy.
func (s *Service) prepareClaim(ctx context.Context, req JobRequest, r Runner) (pendingClaim, error) {
	managerID, err := s.manager(ctx, r, req.SystemID, req.Info)
	if err != nil {
		return pendingClaim{}, err
	}
	jobToken := secrettoken.New(JobTokenPrefix)
	now := s.now()
	c := pendingClaim{Claim: newClaim(r, managerID, managerSystemID(req.SystemID), secrettoken.Hash(jobToken), now, s.ackTTL(now, now)),
		jobToken: jobToken}
	c.decided = decideTwoPhase(ctx, s.gate, &c.Claim, req.TwoPhaseCapable)
	return c, nil
}

// managerSystemID is the system_id a manager is recorded under: gitlab-runner before 15.x
// sends none.
func managerSystemID(systemID string) string {
	if systemID == "" {
		return "<legacy>"
	}
	return systemID
}

// newClaim is the claim of runner r's manager at now, for a job token of hash tokenHash;
// a two-phase assignment waits for its ack until now plus ackTTL.
func newClaim(r Runner, managerID int64, systemID string, tokenHash []byte, now time.Time, ackTTL time.Duration) Claim {
	return Claim{Runner: r, ManagerID: managerID, SystemID: systemID, TokenHash: tokenHash, Now: now,
		AckDeadline: now.Add(ackTTL)}
}

// decideTwoPhase sets how c decides whether its build waits for an ack: never for a runner
// without the two-phase feature; else by the flag's answer for a build of every project,
// when it has one (decided, to be counted once a build is assigned by it); else the claim
// asks the flag for its locked candidate's project (or the provider failed, which that
// per-candidate evaluation counts).
func decideTwoPhase(ctx context.Context, gate TwoPhaseFlag, c *Claim, capable bool) (decided bool) {
	if !capable {
		return false
	}
	runnerID, systemID := c.Runner.ID, c.SystemID
	if c.WaitForAck, decided = gate.TwoPhaseCommitAnyProject(ctx, runnerID, systemID); !decided {
		c.TwoPhase = func(projectID int64) bool { return gate.TwoPhaseCommit(ctx, projectID, runnerID, systemID) }
	}
	return decided
}

// claim takes the oldest build c matches in the store (ErrNoBuild: none), and counts the
// flag's answer for every project when a build was assigned by it.
func (s *Service) claim(ctx context.Context, c pendingClaim) (Claimed, error) {
	claimed, err := s.store.Claim(ctx, c.Claim)
	if err == nil && c.decided {
		s.gate.CountTwoPhaseCommit(c.WaitForAck)
	}
	return claimed, err
}

// nothingClaimed is the 204 of a claim that found no build for r at version. The version
// was read before the claim, and a build that became claimable since has bumped it, so
// until the next bump r's profile is empty: the polls that come after at this version
// (claimpacing.EmptyProfiles) and those waiting for this claim (slot) get their 204 too.
func (s *Service) nothingClaimed(r Runner, version string, slot *claimpacing.FlightSlot) error {
	if version != "" {
		s.empties.Record(profileKey(r), version)
		slot.Done(claimpacing.FlightNothing)
	}
	return &NoJobError{LastUpdate: version}
}

// claimOutcome classifies how a request that held a slot ended, when it did not say so
// itself (a claim that found nothing does, before it answers 204).
func claimOutcome(ctx context.Context, err error) claimpacing.FlightOutcome {
	var noJob *NoJobError
	switch {
	case err == nil:
		return claimpacing.FlightFound
	case ctx.Err() != nil, errors.As(err, &noJob):
		// Its request ended, or a 204 that is not the claim's (the runner was paused).
		return claimpacing.FlightAbandoned
	default:
		return claimpacing.FlightFailed
	}
}

// fallbackOutcomeOf classifies how a request that held a fallback slot ended.
func fallbackOutcomeOf(ctx context.Context, err error) claimpacing.FallbackOutcome {
	var noJob *NoJobError
	switch {
	case err == nil:
		return claimpacing.FallbackFound
	case ctx.Err() != nil:
		return claimpacing.FallbackAbandoned
	case errors.As(err, &noJob):
		return claimpacing.FallbackNothing
	default:
		return claimpacing.FallbackFailed
	}
}

// FallbackStats returns the counts, since the replica started, of its job requests that
// could not read the queue version.
func (s *Service) FallbackStats() claimpacing.FallbackStats { return s.fallback.Stats() }

// handOut completes a claim: the build's project, this replica's caches and the change
// feed, and the ack key of a two-phase build.
func (s *Service) handOut(ctx context.Context, c pendingClaim, claimed Claimed, version string) (*Assignment, error) {
	b := claimed.Build
	// The project comes with the claim (pgstore reads it in the claim's statement), else it
	// is read after the claim, because only the claim says which one. If that read fails
	// the runner gets a 503 for a build it holds: the same as a lost 201, which
	// the ack sweeper (two-phase) or the no-update reaper (legacy) already recovers.
	project, err := s.claimedProject(ctx, claimed)
	if err != nil {
		return nil, fmt.Errorf("read project %d of build %d: %w", b.ProjectID, b.ID, err)
	}
	s.jobs.put(b, c.TokenHash, project.maskedVariables())
	s.changed(Change{PipelineID: b.PipelineID, BuildID: b.ID})
	if b.Status.OnRunnerLog() {
		// One phase: on its runner from now on, as after an ack.
		s.touches.Put(b.ID, c.Now)
		s.armLive(ctx, b.ID, b.TraceSize, c.Now)
	}
	if b.TwoPhase {
		s.grantAck(ctx, b.ID, c.ManagerID, c.AckDeadline)
	}
	return &Assignment{Build: b, JobToken: c.jobToken, LastUpdate: version, Runner: c.Runner, Project: project,
		Pipeline: claimed.Pipeline, Dependencies: claimed.Dependencies}, nil
}

// grantAck sets the ack key of a two-phase build. The row is already waiting in Postgres;
// a failed SET only means the sweeper will time the build out at its deadline of record
// unless the runner acks first. The key expires at the deadline of record, however long
// the claim took (a key that outlives it makes the sweeper extend the wait), and never past
// the max provisioning wait.
func (s *Service) grantAck(ctx context.Context, buildID, managerID int64, deadline time.Time) {
	if ttl := deadline.Sub(s.now()); ttl > 0 {
		if err := s.leases.Grant(ctx, buildID, strconv.FormatInt(managerID, 10), ttl); err != nil {
			// Logged as a count: under a slow Redis every assignment would log it.
			s.faults.Count(ctx, "ack_key_not_set", err)
		}
	}
}

// ReleaseHeld answers every job request the long poll holds, and every later one at once,
// and those parked in the fallback, with 204: a replica that shuts down lets its runners
// ask again elsewhere instead of keeping them until their long poll ends.
func (s *Service) ReleaseHeld() {
	s.wakes.Release()
	s.fallback.Release()
}
