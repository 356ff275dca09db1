package pushes

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-github/v84/github"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/ciconfig"
)

// MaxPayload is the largest webhook body read (GitHub caps its payloads at 25 MB too).
const MaxPayload = 25 << 20

// maxDeliveryID bounds the delivery id kept (forges send a UUID or a GUID).
const maxDeliveryID = 200

// Webhook is one request to a project's receiving path.
type Webhook struct {
	ProjectID int64
	Forge     string
	// Header reads one of the request's headers by name (http.Header.Get).
	Header func(name string) string
	Body   []byte
}

// Result says what a webhook did.
type Result string

const (
	Created  Result = "created"  // a pipeline was created
	Replayed Result = "replayed" // its delivery id was received before: nothing done again
	Ignored  Result = "ignored"  // nothing to build (an event jobapi does not build, a deletion, rules)
)

// Outcome is what Receive did with a webhook.
type Outcome struct {
	Result     Result
	Event      string // the forge's event name
	DeliveryID string
	// Pipeline is the created pipeline (Created); PipelineID also the earlier delivery's
	// (Replayed; 0 when it created none).
	Pipeline   builds.Pipeline
	PipelineID int64
	Message    string
}

// SignatureError is a webhook whose signature (or GitLab token) is missing or wrong, or a
// project that has no secret to check it with: nothing was done.
type SignatureError struct{ Msg string }

func (e *SignatureError) Error() string { return e.Msg }

// headers a forge sends: the event's name, its delivery id and its signature, each the
// first of its list that the request has (Forgejo sends its own names beside Gitea's).
type headers struct {
	event, delivery, signature []string
}

var forgeHeaders = map[string]headers{
	GitHub: {event: []string{"X-GitHub-Event"}, delivery: []string{"X-GitHub-Delivery"}, signature: []string{"X-Hub-Signature-256"}},
	Gitea: {event: []string{"X-Gitea-Event", "X-Forgejo-Event"}, delivery: []string{"X-Gitea-Delivery", "X-Forgejo-Delivery"},
		signature: []string{"X-Gitea-Signature", "X-Forgejo-Signature"}},
	// Idempotency-Key stays the same across GitLab's retries of one event.
	GitLab: {event: []string{"X-Gitlab-Event"}, delivery: []string{"Idempotency-Key", "X-Gitlab-Event-UUID"}, signature: []string{"X-Gitlab-Token"}},
}

func first(header func(string) string, names []string) (value, name string) {
	for _, n := range names {
		if v := header(n); v != "" {
			return v, n
		}
	}
	return "", names[0]
}

// Receive verifies a webhook against the project's secret, reads its event and, for a
// push, a tag or a merge request of the project's own repository, creates the pipeline
// once per delivery id. Errors: builds.ErrNotFound (no such project or forge), a
// *SignatureError (nothing done), a *builds.ValidationError (a payload that does not read),
// and whatever creating the pipeline returned (a *ciconfig.Error for the configuration;
// the delivery is then forgotten, so that the forge's redelivery tries again).
func (s *Service) Receive(ctx context.Context, w Webhook) (Outcome, error) {
	h, ok := forgeHeaders[w.Forge]
	if !ok {
		return Outcome{}, fmt.Errorf("forge %.40q (one of %v): %w", w.Forge, Forges, builds.ErrNotFound)
	}
	settings, err := s.store.PushSettings(ctx, w.ProjectID)
	if err != nil {
		return Outcome{}, err
	}
	if err := verify(w, h, settings); err != nil {
		return Outcome{}, err
	}
	typ, name := first(w.Header, h.event)
	if typ == "" {
		return Outcome{}, &builds.ValidationError{Msg: name + " is missing: which event is this?"}
	}
	var ev event
	if w.Forge == GitLab {
		ev, err = parseGitLab(typ, w.Body)
	} else {
		ev, err = parseGitHub(w.Forge, typ, w.Body)
	}
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{Event: typ}
	if ev.kind == ignored {
		out.Result, out.Message = Ignored, ev.reason
		return out, nil
	}
	out.DeliveryID, _ = first(w.Header, h.delivery)
	if out.DeliveryID == "" || len(out.DeliveryID) > maxDeliveryID {
		// Without an id, the same body twice is the same delivery.
		sum := sha256.Sum256(w.Body)
		out.DeliveryID = "sha256:" + hex.EncodeToString(sum[:])
	}
	d := Delivery{ProjectID: w.ProjectID, Forge: w.Forge, ID: out.DeliveryID, Event: typ, ReceivedAt: s.now()}
	earlier, claimed, err := s.store.ClaimDelivery(ctx, d)
	if err != nil {
		return Outcome{}, err
	}
	if !claimed {
		out.Result, out.PipelineID = Replayed, earlier.PipelineID
		out.Message = fmt.Sprintf("delivery %s was received at %s: nothing done again", d.ID, earlier.ReceivedAt.UTC().Format("2006-01-02T15:04:05Z"))
		return out, nil
	}
	start := Start{ProjectID: w.ProjectID, Ref: pipelineRef(ev.ref), SHA: ev.after, BeforeSHA: ev.before, Source: builds.SourcePush}
	if ev.kind == mergeRequest {
		start.Source, start.Variables = builds.SourceMergeRequestEvent, ev.mr.variables(w.ProjectID)
	}
	// Once claimed, the delivery is this request's to finish, even if its forge hangs up.
	ctx = builds.WithActor(context.WithoutCancel(ctx), builds.Actor{Kind: builds.ActorWebhook, Username: w.Forge + " webhook", Via: "delivery " + d.ID})
	p, err := s.start(ctx, start)
	switch {
	case errors.Is(err, ciconfig.ErrFilteredOut), errors.Is(err, ciconfig.ErrNoJobs):
		// As a push to GitLab: rules build nothing, and the push is done.
		out.Result, out.Message = Ignored, "no pipeline: "+err.Error()
		return out, nil
	case err != nil:
		if rerr := s.store.ReleaseDelivery(ctx, d); rerr != nil {
			s.log.ErrorContext(ctx, "webhook: could not forget the delivery of a failed pipeline; its redelivery will be taken for a replay",
				"project_id", w.ProjectID, "delivery", d.ID, "error", rerr)
		}
		return Outcome{}, err
	}
	if err := s.store.DeliveryCreated(ctx, d, p.ID); err != nil {
		// The pipeline exists and the claim holds: a replay creates nothing, it only cannot
		// name the pipeline.
		s.log.WarnContext(ctx, "webhook: could not record the delivery's pipeline", "project_id", w.ProjectID,
			"delivery", d.ID, "pipeline_id", p.ID, "error", err)
	}
	out.Result, out.Pipeline, out.PipelineID = Created, p, p.ID
	out.Message = fmt.Sprintf("pipeline %d created for %s at %s", p.ID, start.Ref, start.SHA)
	return out, nil
}

// pipelineRef is a ref as a pipeline names it: a branch by its name, a tag as refs/tags/….
func pipelineRef(ref string) string { return strings.TrimPrefix(ref, "refs/heads/") }

// verify checks the webhook's signature as its forge makes it: GitHub and Gitea sign the
// body with HMAC-SHA256 (GitHub's header says sha256=<hex>, Gitea's is the hex alone);
// GitLab sends the secret itself, compared in constant time.
func verify(w Webhook, h headers, settings Settings) error {
	if settings.WebhookSecret == "" {
		return &SignatureError{Msg: fmt.Sprintf("project %d has no webhook secret to verify webhooks with: set one with PUT /api/v4/projects/%d/hooks/inbound",
			w.ProjectID, w.ProjectID)}
	}
	sig, name := first(w.Header, h.signature)
	if sig == "" {
		return &SignatureError{Msg: name + " is missing: give the webhook the project's secret on " + w.Forge}
	}
	secret := []byte(settings.WebhookSecret)
	switch w.Forge {
	case GitLab:
		a, b := sha256.Sum256([]byte(sig)), sha256.Sum256(secret)
		if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return &SignatureError{Msg: name + " is not the project's webhook secret"}
		}
		return nil
	case GitHub:
		if !strings.HasPrefix(sig, "sha256=") {
			return &SignatureError{Msg: name + " must be sha256=<hex HMAC of the body>"}
		}
	default:
		sig = "sha256=" + sig
	}
	if err := github.ValidateSignature(sig, w.Body, secret); err != nil {
		return &SignatureError{Msg: name + " does not verify with the project's webhook secret: " + err.Error()}
	}
	return nil
}
