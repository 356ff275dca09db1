package pgstore

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/testenv"
)

// runtimeChecked lists the statements that write a status from a parameter: the Go code
// running them checks the transition against the table first (Finish.Check in Finish and
// finishBuildTx, CheckTransition in Claim for assignBuild and, with the status decided
// before the claim, assignOldest and its untagged and ref_protected variants,
// CheckPipelineTransition in advanceLocked; CreateChild checks startBridge's target with
// builds.CheckTransition).
var runtimeChecked = map[string]bool{"finishBuild": true, "assignBuild": true, "setPipelineStatus": true,
	"startBridge": true, "assignOldest": true, "assignOldestUntagged": true,
	"assignOldestProtected": true, "assignOldestProtectedUntagged": true}

// eventsCheckedElsewhere lists the statements that record an event the scan cannot read
// (a parameter, or a CASE over rows the statement does not change), with where it is
// checked: finishBuild's $8 by Finish.Check; addEvent's $2 by the statement itself
// (status = ANY of builds.EventStatuses, under FOR SHARE); insertEvents' first events by
// CreatePipeline against initialEvents before the rows go in.
var eventsCheckedElsewhere = map[string]bool{"finishBuild": true, "addEvent": true, "insertEvents": true}

// The job plan's statements (jobs.go), the play and the due pass are read by the scan like
// any other; CreatePipeline's COPY is not SQL text, so it checks each initial status with
// builds.CheckTransition before the rows go in.

// statusWrite is one status change a statement makes, as read from its text.
type statusWrite struct {
	table  string // "builds" or "pipelines"
	from   []string
	to     string
	events []string
}

var (
	updateOf  = regexp.MustCompile(`UPDATE (builds|pipelines) SET `)
	insertOf  = regexp.MustCompile(`INSERT INTO (builds|pipelines) \(`)
	setStatus = regexp.MustCompile(`(?:^|[\s,])status = ('(\w+)'|\$\d+)`)
	// queuedCase is queuedStatus: one status without a resource group, another with one.
	queuedCase  = regexp.MustCompile(`CASE WHEN resource_group_id IS NULL THEN '(\w+)' ELSE '(\w+)' END`)
	isStatus    = regexp.MustCompile(`(?:^|[\s,(.])status = '(\w+)'`)
	inStatuses  = regexp.MustCompile(`(?:^|[\s,(.])status IN \(([^)]*)\)`)
	anyStatus   = regexp.MustCompile(`(?:^|[\s,(.])status = ANY`)
	quotedWord  = regexp.MustCompile(`'(\w+)'`)
	eventInsert = regexp.MustCompile(`INSERT INTO build_events[^;]*`)
	segmentEnd  = regexp.MustCompile(`RETURNING|\n\)`)
)

// TestStatementsWriteOnlyDeclaredTransitions reads every SQL statement of the package (the
// constants no other constant is built from, and string literals outside constants) and
// checks each status it writes against builds.BuildTransitions and
// builds.PipelineTransitions: SQL that moves a build or a pipeline along an undeclared
// edge fails here, before any test runs it.
func TestStatementsWriteOnlyDeclaredTransitions(t *testing.T) {
	stmts := statements(t)
	found := 0
	for name, sql := range stmts {
		writes, err := statusWrites(sql)
		if err != "" {
			t.Errorf("%s: %s:\n%s", name, err, sql)
			continue
		}
		for _, w := range writes {
			found++
			if w.to == "$" {
				if !runtimeChecked[name] {
					t.Errorf("%s writes a %s status from a parameter but is not checked at run time", name, w.table)
				}
				continue
			}
			if w.table == "pipelines" {
				for _, from := range w.from {
					if err := builds.CheckPipelineTransition(from, w.to); err != nil {
						t.Errorf("%s: %v", name, err)
					}
				}
				continue
			}
			for _, from := range w.from {
				if !declared(builds.Status(from), builds.Status(w.to), w.events) {
					t.Errorf("%s: undeclared build transition %s → %s (events %v)", name, show(from), w.to, w.events)
				}
			}
		}
	}
	// The scan must see the statements it guards, not pass by reading nothing.
	if found < 24 {
		t.Fatalf("found %d status writes in %d statements; the scan no longer reads the SQL", found, len(stmts))
	}
}

// paramEvent: an event insert whose type is a parameter.
var paramEvent = regexp.MustCompile(`INSERT INTO build_events \([^)]*\)\s*(?:SELECT\s+[^,]+,|VALUES\s*\([^,]+,)\s*\$\d+`)

// TestStatementsRecordOnlyDeclaredEvents extends the status check to events: every event a
// statement records must be declared either by one of the statement's own status changes,
// or, for an event recorded without one (a keep-alive, a retry's mark on the old attempt,
// the stuck-stage mark), without a state change for every state the statement's
// compare-and-set accepts (builds.EventStatuses). An event-only insert without such a
// condition fails, as does one whose type is a parameter nobody checks.
func TestStatementsRecordOnlyDeclaredEvents(t *testing.T) {
	eventOnly := 0
	for name, sql := range statements(t) {
		if !strings.Contains(sql, "INSERT INTO build_events") {
			continue
		}
		if eventsCheckedElsewhere[name] {
			continue
		}
		if paramEvent.MatchString(sql) {
			t.Errorf("%s records an event type from a parameter but is not checked", name)
			continue
		}
		writes, _ := statusWrites(sql)
		var events []string
		for _, part := range eventInsert.FindAllString(sql, -1) {
			for _, m := range quotedWord.FindAllStringSubmatch(part, -1) {
				if slices.Contains(builds.AllEvents, m[1]) && !slices.Contains(events, m[1]) {
					events = append(events, m[1])
				}
			}
		}
		if len(events) == 0 {
			t.Errorf("%s inserts into build_events but the scan reads no event type", name)
		}
		for _, ev := range events {
			if recordsWrite(writes, ev) {
				continue
			}
			eventOnly++
			conds := conditions(sql)
			if len(conds) == 0 {
				t.Errorf("%s records %q without a state change and without a compare-and-set on the state", name, ev)
				continue
			}
			allowed := builds.EventStatuses(ev)
			for _, st := range conds {
				if !slices.Contains(allowed, builds.Status(st)) {
					t.Errorf("%s records %q in state %s; the table declares it without a state change only in %v", name, ev, st, allowed)
				}
			}
		}
	}
	if eventOnly < 3 {
		t.Fatalf("found %d event-only inserts; the scan no longer reads keepAlive, insertRetry and markStuckBuilds", eventOnly)
	}
}

// recordsWrite reports whether ev is declared for one of the build status changes writes.
func recordsWrite(writes []statusWrite, ev string) bool {
	for _, w := range writes {
		if w.table != "builds" {
			continue
		}
		if w.to == "$" {
			return true // checked at run time with its event (runtimeChecked)
		}
		for _, from := range w.from {
			if declared(builds.Status(from), builds.Status(w.to), []string{ev}) {
				return true
			}
		}
	}
	return false
}

func show(s string) string {
	if s == "" {
		return "(new)"
	}
	return s
}

// declared reports whether a row of the table moves from → to and, when the statement
// records events, records one of them.
func declared(from, to builds.Status, events []string) bool {
	for _, tr := range builds.BuildTransitions {
		target := tr.To
		if target == builds.StatusSame {
			target = from
		}
		if !slices.Contains(tr.From, from) || target != to {
			continue
		}
		if len(events) == 0 || slices.Contains(events, tr.Event) {
			return true
		}
	}
	return false
}

// statusWrites finds the status changes of one statement; a non-empty string says why the
// statement could not be read.
func statusWrites(sql string) ([]statusWrite, string) {
	var events []string
	for _, part := range eventInsert.FindAllString(sql, -1) {
		for _, m := range quotedWord.FindAllStringSubmatch(part, -1) {
			if slices.Contains(builds.AllEvents, m[1]) {
				events = append(events, m[1])
			}
		}
	}
	var out []statusWrite
	for _, loc := range updateOf.FindAllStringSubmatchIndex(sql, -1) {
		table := sql[loc[2]:loc[3]]
		rest := sql[loc[1]:]
		if end := segmentEnd.FindStringIndex(rest); end != nil {
			rest = rest[:end[0]]
		}
		set, where, _ := strings.Cut(rest, "WHERE")
		m := setStatus.FindStringSubmatch(set)
		if q := queuedCase.FindStringSubmatch(set); m == nil && q != nil {
			// Two writes, each from the WHERE's statuses.
			for _, to := range q[1:] {
				w := statusWrite{table: table, to: to, events: events, from: conditions(where)}
				if w.from == nil {
					return nil, "changes a status without a compare-and-set on the old one"
				}
				out = append(out, w)
			}
			continue
		}
		if m == nil {
			if strings.Contains(set, "status") {
				return nil, "sets a status in a form this scan does not read"
			}
			continue // not a state change (touch, ack deadline, retried_by)
		}
		w := statusWrite{table: table, to: m[2], events: events}
		if strings.HasPrefix(m[1], "$") {
			w.to = "$"
		}
		w.from = conditions(where)
		if w.from == nil {
			// UPDATE … FROM c: the candidate's conditions come before the UPDATE.
			w.from = conditions(sql[:loc[0]])
		}
		if w.from == nil && w.to != "$" && !anyStatus.MatchString(where) {
			return nil, "changes a status without a compare-and-set on the old one"
		}
		if table == "pipelines" {
			w.events = nil
		}
		out = append(out, w)
	}
	for _, loc := range insertOf.FindAllStringSubmatchIndex(sql, -1) {
		table := sql[loc[2]:loc[3]]
		rest := sql[loc[1]:]
		if end := segmentEnd.FindStringIndex(rest); end != nil {
			rest = rest[:end[0]]
		}
		var to []string
		for _, m := range quotedWord.FindAllStringSubmatch(queuedCase.ReplaceAllString(rest, ""), -1) {
			if _, ok := builds.ParseStatus(m[1]); ok {
				to = append(to, m[1])
			}
		}
		if q := queuedCase.FindStringSubmatch(rest); q != nil {
			to = append(to, q[1:]...)
		}
		if len(to) != 1 && (len(to) != 2 || !queuedCase.MatchString(rest)) {
			return nil, "inserts a " + table + " row without one status literal"
		}
		for _, st := range to {
			w := statusWrite{table: table, from: []string{""}, to: st, events: events}
			if table == "pipelines" {
				w.events = nil
			}
			out = append(out, w)
		}
	}
	return out, ""
}

// conditions lists the statuses a WHERE clause accepts (nil when it has no such condition).
func conditions(where string) []string {
	var from []string
	for _, m := range isStatus.FindAllStringSubmatch(where, -1) {
		from = append(from, m[1])
	}
	for _, m := range inStatuses.FindAllStringSubmatch(where, -1) {
		for _, q := range quotedWord.FindAllStringSubmatch(m[1], -1) {
			from = append(from, q[1])
		}
	}
	return from
}

// statements evaluates the package's string constants and returns those that no other
// constant is built from, with every string literal outside a constant declaration.
func statements(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	exprs := map[string]ast.Expr{}
	used := map[string]bool{}
	loose := map[string]string{}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		inConst := map[ast.Node]bool{}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if i < len(vs.Values) {
						exprs[id.Name] = vs.Values[i]
						ast.Inspect(vs.Values[i], func(n ast.Node) bool {
							inConst[n] = true
							if ref, ok := n.(*ast.Ident); ok {
								used[ref.Name] = true
							}
							return true
						})
					}
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && !inConst[n] {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					loose[fset.Position(lit.Pos()).String()] = s
				}
			}
			return true
		})
	}
	var eval func(e ast.Expr) (string, bool)
	eval = func(e ast.Expr) (string, bool) {
		switch e := e.(type) {
		case *ast.BasicLit:
			if e.Kind != token.STRING {
				return "", false
			}
			s, err := strconv.Unquote(e.Value)
			return s, err == nil
		case *ast.Ident:
			if x, ok := exprs[e.Name]; ok {
				return eval(x)
			}
		case *ast.ParenExpr:
			return eval(e.X)
		case *ast.BinaryExpr:
			if e.Op == token.ADD {
				a, ok1 := eval(e.X)
				b, ok2 := eval(e.Y)
				return a + b, ok1 && ok2
			}
		}
		return "", false
	}
	out := loose
	for name, e := range exprs {
		if used[name] {
			continue
		}
		if s, ok := eval(e); ok {
			out[name] = s
		}
	}
	return out
}

// TestFinishRefusesUndeclaredTransition: the store checks a Finish against the table
// before it writes, so code asking for an edge the table lacks fails in every test that
// runs it, and the build keeps its state.
func TestFinishRefusesUndeclaredTransition(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := New(testenv.Pool(t))
	d := builds.PipelineDefinition{ProjectID: 1, Stages: []string{"test"},
		Jobs: []builds.JobDefinition{{Name: "a", Stage: "test", Script: []string{"true"}}}}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	p, err := s.CreatePipeline(ctx, d, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	id := p.Builds[0].ID
	// pending → success: no runner ever ran it.
	_, err = s.Finish(ctx, builds.Finish{BuildID: id, From: []builds.Status{builds.StatusPending},
		To: builds.StatusSuccess, Event: builds.EventFinished, Now: time.Now()})
	var te *builds.TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("Finish pending → success: %v; want a *builds.TransitionError", err)
	}
	if b, err := s.Build(ctx, id); err != nil || b.Status != builds.StatusPending {
		t.Fatalf("build after the refused Finish: %s, %v; want still pending", b.Status, err)
	}
}

// TestAddEventRefusesUndeclaredEvent: an event without a state change goes in only while
// the build is in a state the table declares it for, as the row is at the write: a
// keepalive of a pending build is refused (a *builds.TransitionError naming the state) and
// leaves no event, a retry_exhausted of a failed one goes in, and an event that always
// comes with a state change (cancel_requested) is never appended on its own.
func TestAddEventRefusesUndeclaredEvent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := New(testenv.Pool(t))
	d := builds.PipelineDefinition{ProjectID: 1, Stages: []string{"test"},
		Jobs: []builds.JobDefinition{{Name: "a", Stage: "test", Script: []string{"true"}}}}
	if err := d.Normalize(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	p, err := s.CreatePipeline(ctx, d, now)
	if err != nil {
		t.Fatal(err)
	}
	id := p.Builds[0].ID
	events := func() string {
		ev, _, err := s.Events(ctx, id, builds.Page{Page: 1, PerPage: 100})
		if err != nil {
			t.Fatal(err)
		}
		var types []string
		for _, e := range ev {
			types = append(types, e.Type)
		}
		return strings.Join(types, ",")
	}
	for _, typ := range []string{builds.EventKeepalive, builds.EventCancelRequested, builds.EventRetryExhausted} {
		err := s.AddEvent(ctx, builds.Event{BuildID: id, Type: typ, At: now})
		var te *builds.TransitionError
		if !errors.As(err, &te) || te.From != string(builds.StatusPending) {
			t.Fatalf("AddEvent %s of a pending build: %v; want a *builds.TransitionError from pending", typ, err)
		}
	}
	if got := events(); got != "queued" {
		t.Fatalf("events after refused appends: %s, want queued", got)
	}
	if _, err := s.Finish(ctx, builds.Finish{BuildID: id, From: []builds.Status{builds.StatusPending},
		To: builds.StatusFailed, Reason: builds.ReasonStuckPending, Event: builds.EventDroppedStuck, Now: now}); err != nil {
		t.Fatal(err)
	}
	if err := s.AddEvent(ctx, builds.Event{BuildID: id, Type: builds.EventRetryExhausted, At: now}); err != nil {
		t.Fatalf("AddEvent retry_exhausted of a failed build: %v", err)
	}
	if err := s.AddEvent(ctx, builds.Event{BuildID: id, Type: builds.EventKeepalive, At: now}); err == nil {
		t.Fatal("AddEvent keepalive of a failed build went in")
	}
	if got := events(); got != "queued,dropped_stuck,retry_exhausted" {
		t.Fatalf("events: %s, want queued,dropped_stuck,retry_exhausted", got)
	}
	if err := s.AddEvent(ctx, builds.Event{BuildID: id + 1000, Type: builds.EventRetryExhausted, At: now}); !errors.Is(err, builds.ErrNotFound) {
		t.Fatalf("AddEvent to no build: %v, want builds.ErrNotFound", err)
	}
}
