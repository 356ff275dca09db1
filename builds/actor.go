package builds

import (
	"context"
	"slices"
	"strconv"
)

// ActorKind says what kind of caller an Actor is.
type ActorKind string

// The callers jobapi knows. A person acts as ActorUser; the admin token is the bootstrap
// credential and acts as ActorAdminToken; the rest is machinery acting on its own account.
const (
	ActorUser       ActorKind = "user"
	ActorAdminToken ActorKind = "admin_token"
	ActorRunner     ActorKind = "runner"
	ActorTrigger    ActorKind = "trigger"
	ActorSchedule   ActorKind = "schedule"
	ActorWebhook    ActorKind = "webhook"
	ActorSystem     ActorKind = "system"
)

// The admin token's holder as GitLab's API shows a user: it was never created, and takes
// the id GitLab's first administrator has.
const (
	AdminUserID   int64 = 1
	AdminUsername       = "admin"
	AdminName           = "Administrator"
)

// Actor is who asks for an action: it is resolved once from the request's credential (a
// personal access token, a web session, the admin token) and travels in the context, so
// that permission checks, the audit log and the events of builds and pipelines all name
// the same caller.
type Actor struct {
	Kind ActorKind
	// UserID is the user's id for ActorUser, else 0.
	UserID int64
	// Username is the user's username for ActorUser; for machinery, a short name of it
	// ("admin", "runner #12", "trigger #3").
	Username string
	// Name is the user's display name ("" for machinery).
	Name string
	// Admin may act on every project and on the instance.
	Admin bool
	// Scopes limit what a personal access token may do; nil means not limited by scopes
	// (the admin token, a web session).
	Scopes []string
	// Via says through what the caller came ("request 01J…", "web session ab12cd34",
	// "token #7"), so that the audit log links an action to the access log without
	// revealing a secret.
	Via string
}

// HasScope reports whether the actor may use scope: always when it is not limited.
func (a Actor) HasScope(scope string) bool {
	return a.Scopes == nil || slices.Contains(a.Scopes, scope)
}

// String is how the audit log names the actor: "alice (web session ab12cd34)".
func (a Actor) String() string {
	name := a.Username
	if name == "" {
		name = string(a.Kind)
	}
	if a.Via == "" {
		return name
	}
	return name + " (" + a.Via + ")"
}

type actorKey struct{}

// WithActor returns ctx carrying a.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorFrom returns the actor ctx carries; ok is false when no credential was resolved.
func ActorFrom(ctx context.Context) (a Actor, ok bool) {
	a, ok = ctx.Value(actorKey{}).(Actor)
	return a, ok
}

// actorName is how the audit log and the events of builds name ctx's actor (its String),
// and "jobapi" for what the server does on its own account with no actor set.
func actorName(ctx context.Context) string {
	if a, ok := ActorFrom(ctx); ok {
		return a.String()
	}
	return "jobapi"
}

// systemActor is jobapi itself acting for a rule (auto-cancel, a reaper): name says which.
func systemActor(name string) Actor { return Actor{Kind: ActorSystem, Username: name} }

// runnerActor is a runner acting on its own account with its token (unregister, token
// reset).
func runnerActor(id int64) Actor {
	return Actor{Kind: ActorRunner, Username: "runner #" + strconv.FormatInt(id, 10)}
}
