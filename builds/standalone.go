package builds

import (
	"context"
	"time"
)

// Standalone is what Deps.QueueFeed, Events, Changes and Live are set to by a service that
// runs without Redis's feeds on purpose: the bench's twin, which counts the service's own
// Postgres statements. The service then carries those roles out alone, as a replica whose
// Redis never answered would: a queue bump wakes every held long poll (no announcement
// names the runner), pipeline waiters poll Postgres, no change hints are sent (live views
// poll; SubscribeChanges is ErrUnavailable), and every trace PATCH appends to Postgres. A
// replica always has Redis (server.ServiceDeps plus the replica's redisstore); NewService
// refuses a service that leaves one of these out without saying so.
var Standalone standalone

// standalone's methods are never called: NewService turns it into the service's own way of
// doing without (the nil checks of longpoll.go, wait.go, changes.go and livetrace.go).
type standalone struct{}

var (
	_ QueueFeed      = Standalone
	_ PipelineEvents = Standalone
	_ ChangeFeed     = Standalone
	_ LiveTraces     = Standalone
)

func (standalone) BumpAnnounced(context.Context, int64) error { return ErrUnavailable }
func (standalone) SubscribeQueue(context.Context, func(), func(string, int64)) error {
	return ErrUnavailable
}
func (standalone) Publish(context.Context, int64) error                 { return ErrUnavailable }
func (standalone) Subscribe(context.Context, func(), func(int64)) error { return ErrUnavailable }
func (standalone) PublishChanges(context.Context, []Change) error       { return ErrUnavailable }
func (standalone) SubscribeChanges(context.Context, func(), func(Change)) error {
	return ErrUnavailable
}
func (standalone) Append(context.Context, int64, int64, []byte, time.Time) (LiveAppend, error) {
	return LiveAppend{Outcome: LiveMissing}, ErrUnavailable
}
func (standalone) Arm(context.Context, int64, Status, int64, time.Time) (Status, error) {
	return "", ErrUnavailable
}
func (standalone) Fence(context.Context, int64) error         { return ErrUnavailable }
func (standalone) Cancel(context.Context, int64) error        { return ErrUnavailable }
func (standalone) Close(context.Context, int64, Status) error { return ErrUnavailable }
func (standalone) Trim(context.Context, int64, int64) error   { return ErrUnavailable }
func (standalone) Seal(context.Context, int64, Status, int64) (int64, []byte, bool, error) {
	return 0, nil, false, ErrUnavailable
}
func (standalone) Tail(context.Context, int64) (int64, []byte, bool, error) {
	return 0, nil, false, ErrUnavailable
}
func (standalone) Drop(context.Context, int64, Status) error { return ErrUnavailable }
