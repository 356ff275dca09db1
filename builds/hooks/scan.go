package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/forgestatus"
)

// Where the events come from, and why there.
//
// Every change of a build's state is already written, in the same statement or
// transaction as the change, as a row of build_events (bigserial id): the claim's
// "assigned", a finish, a cancel, a queued stage, a new pipeline's jobs. A pipeline's
// status only changes in a transaction that also writes one of those rows. So the event
// log of record exists, and the runner's requests (claim, ack, update) need not do
// anything more for webhooks: no extra statement, no trigger, no index on their hot rows.
//
// The pass on every replica reads build_events after a cursor, keeps those of projects
// with hooks or a forge, reads each touched pipeline as it is now, and writes one
// delivery per hook and state (key: pipeline, status and number of jobs; job and status;
// the push) with ON CONFLICT DO NOTHING, in the same transaction that moves the cursor.
// A crash anywhere loses nothing (the cursor moves only with the deliveries), and two
// replicas that read the same events write each delivery once.
//
// The cursor lags: ids are taken when a transaction inserts, but become visible when it
// commits, so a transaction that took id 100 may commit after id 101 was read. The pass
// therefore reads from safe_id, and an id it saw becomes safe only after settle has passed
// (the transactions that write build_events are single statements or short batches). The
// events between safe_id and the head are read again by the next passes, which is
// harmless: their deliveries exist, and the insert writes nothing.
//
// What this gives up: a state that a build or pipeline passed through between two passes
// (a second) is reported as the state it is in when read, not each one (a job that ran for
// 200 ms may get pending and success, not running). A pipeline retried after it finished
// reports its states again: the key holds its number of jobs, which a retry raises.

// settle is how long a seen build_events id waits before the cursor passes it.
const settle = 5 * time.Second

// scanBatch bounds the events one pass reads.
const scanBatch = 2000

// idleLag: with no hook or forge anywhere, the cursor jumps to the head once it lags this
// many events (a hook receives only the events after its creation anyway).
const idleLag = 10_000

// next is where the cursor goes after a pass that read up to read (the head, or the last
// event of a full batch).
func (c Cursor) next(now time.Time, read int64, full bool) Cursor {
	n := c
	switch {
	case full:
		// A full batch is far behind the head: its ids committed long ago.
		n = Cursor{SafeID: read, SeenID: max(read, c.SeenID), SeenAt: now}
	case now.Sub(c.SeenAt) >= settle:
		n = Cursor{SafeID: max(c.SafeID, c.SeenID), SeenID: max(read, c.SeenID), SeenAt: now}
	}
	return n
}

// EventPass turns build_events into deliveries; every replica runs one (Worker).
type EventPass struct {
	Outbox Outbox
	Site   Site
	Now    func() time.Time
}

// PassResult counts what one event pass did.
type PassResult struct {
	Events   int // events of projects with targets read
	Enqueued int // deliveries written
}

// Once reads the events after the cursor and writes their deliveries.
func (p *EventPass) Once(ctx context.Context) (PassResult, error) {
	sc, err := p.Outbox.ScanHookEvents(ctx, scanBatch)
	if err != nil {
		return PassResult{}, err
	}
	res := PassResult{Events: len(sc.Events)}
	full := len(sc.Events) == scanBatch
	read := sc.HeadID
	if full {
		read = sc.Events[len(sc.Events)-1].EventID
	}
	next := sc.Cursor.next(sc.Now, read, full)
	if !sc.AnyTargets {
		if sc.HeadID-sc.Cursor.SafeID < idleLag {
			return res, nil
		}
		next = Cursor{SafeID: sc.HeadID, SeenID: sc.HeadID, SeenAt: sc.Now}
	}
	ds, err := p.deliveries(ctx, sc)
	if err != nil {
		return res, err
	}
	if len(ds) == 0 && next == sc.Cursor {
		return res, nil
	}
	res.Enqueued, err = p.Outbox.EnqueueHookDeliveries(ctx, ds, sc.Cursor, next)
	return res, err
}

// deliveries are the candidate deliveries of a scan's events, one per target and state.
func (p *EventPass) deliveries(ctx context.Context, sc Scan) ([]Delivery, error) {
	type touchedPipeline struct {
		projectID int64
		lastEvent int64
		builds    map[int64]int64 // build id → its last event id
	}
	pipelines := map[int64]*touchedPipeline{}
	var order []int64
	for _, e := range sc.Events {
		tp := pipelines[e.PipelineID]
		if tp == nil {
			tp = &touchedPipeline{projectID: e.ProjectID, builds: map[int64]int64{}}
			pipelines[e.PipelineID] = tp
			order = append(order, e.PipelineID)
		}
		tp.lastEvent = max(tp.lastEvent, e.EventID)
		tp.builds[e.BuildID] = max(tp.builds[e.BuildID], e.EventID)
	}
	now := p.now()
	var out []Delivery
	projects := map[int64]builds.Project{}
	for _, id := range order {
		tp := pipelines[id]
		targets := sc.Targets[tp.projectID]
		pl, err := p.Outbox.Pipeline(ctx, tp.projectID, id)
		if errors.Is(err, builds.ErrNotFound) {
			continue // deleted since
		}
		if err != nil {
			return nil, err
		}
		prj, ok := projects[tp.projectID]
		if !ok {
			if prj, err = p.Outbox.Project(ctx, tp.projectID); err != nil {
				if errors.Is(err, builds.ErrNotFound) {
					continue
				}
				return nil, err
			}
			projects[tp.projectID] = prj
		}
		for _, th := range targets.Hooks {
			if tp.lastEvent <= th.SinceEventID {
				continue
			}
			ds, err := p.Site.hookDeliveries(th, pl, prj, tp.builds, now)
			if err != nil {
				return nil, err
			}
			out = append(out, ds...)
		}
		if f := targets.Forge; f != nil && tp.lastEvent > f.SinceEventID {
			if d, ok, err := p.Site.forgeDelivery(pl, now); err != nil {
				return nil, err
			} else if ok {
				out = append(out, d)
			}
		}
	}
	return out, nil
}

func (p *EventPass) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// jobsCount is the number of builds of a pipeline, retries included: the generation of
// its states (a retry adds one, so its states are reported again).
func jobsCount(p builds.Pipeline) int { return len(p.Builds) }

func delivery(projectID, hookID int64, event, key string, payload any, now time.Time) (Delivery, error) {
	raw, err := json.Marshal(payload)
	if err != nil {
		return Delivery{}, fmt.Errorf("%s payload: %w", event, err)
	}
	return Delivery{ProjectID: projectID, HookID: hookID, Event: event, Key: key, UUID: newUUID(), Payload: raw,
		State: StatePending, NextAttemptAt: now, CreatedAt: now}, nil
}

// hookDeliveries are hook th's deliveries for pipeline p whose touched builds (id → last
// event id) changed.
func (s Site) hookDeliveries(th TargetHook, p builds.Pipeline, prj builds.Project, touched map[int64]int64, now time.Time) ([]Delivery, error) {
	h := th.Hook
	var out []Delivery
	add := func(event, key string, payload any) error {
		d, err := delivery(p.ProjectID, h.ID, event, key, payload, now)
		if err == nil {
			out = append(out, d)
		}
		return err
	}
	if h.PipelineEvents {
		key := fmt.Sprintf("pipeline:%d:%s:%d", p.ID, p.Status, jobsCount(p))
		if err := add(EventPipeline, key, s.pipelineEvent(p, prj, now)); err != nil {
			return nil, err
		}
	}
	if h.JobEvents {
		for _, b := range p.Builds {
			ev, ok := touched[b.ID]
			if !ok || ev <= th.SinceEventID || b.Bridge {
				continue
			}
			key := fmt.Sprintf("job:%d:%s", b.ID, hookStatus(b.Status))
			if err := add(EventJob, key, s.jobEvent(b, p, prj, now)); err != nil {
				return nil, err
			}
		}
	}
	if p.Source == builds.SourcePush && p.ParentPipelineID == 0 {
		event, payload := s.pushEvent(p, prj)
		wanted := h.TagPushEvents
		if event == EventPush {
			wanted = h.PushEvents && branchMatches(h, strings.TrimPrefix(payload.Ref, "refs/heads/"))
		}
		if wanted {
			if err := add(event, fmt.Sprintf("push:%d", p.ID), payload); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// forgeDelivery is the commit status of p's state, when it is one forges are told and p is
// no child pipeline (its parent's status covers the commit).
func (s Site) forgeDelivery(p builds.Pipeline, now time.Time) (Delivery, bool, error) {
	if !forgestatus.Reported(p.Status) || p.ParentPipelineID != 0 {
		return Delivery{}, false, nil
	}
	ref, _ := refAndTag(p.Ref)
	st := forgestatus.Status{SHA: p.SHA, Ref: ref, State: p.Status, TargetURL: s.PipelineURL(p),
		Description: forgestatus.Describe(p.Status), PipelineID: p.ID}
	d, err := delivery(p.ProjectID, 0, EventForgeStatus, fmt.Sprintf("status:%d:%s:%d", p.ID, p.Status, jobsCount(p)), st, now)
	return d, err == nil, err
}
