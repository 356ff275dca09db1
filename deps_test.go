package jobapi_test

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the import path of this repository; rules below name its packages relative to it.
const module = "github.com/jobapi/jobapi"

// layerRule is one line of the dependency rule (STYLE "The shape we aim for"). Patterns are
// written as for the go command: "./builds" is this module's package, "./handlers/..." a
// tree of them, "./..." all of them; "net/http" and "github.com/jackc/pgx/v5/..." name
// packages of the standard library and of other modules.
type layerRule struct {
	pkgs string
	// allowed, when set, is all the packages may import besides the standard library. What an
	// allowed package imports in turn is its own business (pgx's dependencies are pgx's), so
	// the walk stops there; it continues through the standard library.
	allowed []string
	// forbidden may not be reached by any chain of imports.
	forbidden []string
	why       string
}

var layerRules = []layerRule{
	{pkgs: "./builds", allowed: []string{"./environment", "./gitref", "./builds/longpoll", "./builds/claimpacing", "./builds/recent", "./faultlog", "./secrettoken"}, forbidden: []string{"net/http"},
		why: "the domain uses only the standard library, git's ref rules, GitLab's environment rules, the log of repeated faults and the random tokens with their hashes (leaves) and the job request's concurrency machinery, which knows nothing of builds (builds/longpoll, builds/claimpacing, builds/recent), and no transport; the concerns beside it (builds/artifacts, builds/joblogs, builds/projects, builds/resourcegroups, builds/listings, builds/views, builds/runners, builds/auditlog, builds/triggers, builds/schedules) depend on it, never the reverse"},
	{pkgs: "./builds/longpoll", allowed: []string{}, forbidden: []string{"net/http"},
		why: "the hub of held job requests and the pipeline waits' watchers are machinery under builds: the standard library only, the queue's version, its feed and the claimable count reach them as small interfaces, and no transport"},
	{pkgs: "./builds/claimpacing", allowed: []string{}, forbidden: []string{"net/http"},
		why: "the claim flights, the fallback claims' pacing and the empty-profile record are machinery under builds: the standard library only, profiles reach them as keys, and no transport"},
	{pkgs: "./httppark", allowed: []string{}, forbidden: []string{"./builds", "./handlers"},
		why: "holding an HTTP/1.1 request off its goroutine is transport machinery: the standard library only, no knowledge of builds or of the routes that park"},
	{pkgs: "./builds/recent", allowed: []string{}, forbidden: []string{"net/http"},
		why: "the two-generation map by id that builds' replica caches age out with is machinery under builds: the standard library only, and no transport"},
	{pkgs: "./builds/artifacts", allowed: []string{"./builds", "./junit", "./secrettoken"}, forbidden: []string{"net/http"},
		why: "job artifacts are a concern beside the domain: its types and calls, the JUnit reader and the standard library; stores reach it as interfaces, and no transport"},
	{pkgs: "./builds/joblogs", allowed: []string{"./builds"}, forbidden: []string{"net/http"},
		why: "job logs past their build are a concern beside the domain: its types and calls, its store and the object store as interfaces, and no transport"},
	{pkgs: "./builds/projects", allowed: []string{"./builds", "./gitref", "./gitremote"}, forbidden: []string{"net/http"},
		why: "projects and what operators set on them are a concern beside the domain: its types and calls and its store as an interface; the claim reads projects through builds.ProjectReader, never this package"},
	{pkgs: "./builds/resourcegroups", allowed: []string{"./builds"}, forbidden: []string{"net/http"},
		why: "resource groups' API is a concern beside the domain: its types, clock, queue bump and audit log, its store as an interface; the store assigns groups, builds never imports this package"},
	{pkgs: "./builds/listings", allowed: []string{"./builds"}, forbidden: []string{"net/http"},
		why: "GitLab's filtered lists are a concern beside the domain: its types and clock, its store as an interface; builds never imports them"},
	{pkgs: "./builds/auditlog", allowed: []string{"./builds"}, forbidden: []string{"net/http"},
		why: "the audit log's reads are a concern beside the domain: its store as an interface, recording through the core's RecordAudit; builds never imports it"},
	{pkgs: "./builds/runners", allowed: []string{"./builds", "./secrettoken"}, forbidden: []string{"net/http"},
		why: "the operator's side of runners is a concern beside the domain: its store as an interface, the core's runner cache and queue bump, token issue, deletion and audit log through calls; builds never imports it"},
	{pkgs: "./builds/views", allowed: []string{"./builds"}, forbidden: []string{"net/http"},
		why: "the web UI's reads across builds are a concern beside the domain: its types, their store as an interface; builds never imports them"},
	{pkgs: "./junit", allowed: []string{},
		why: "the JUnit XML reader uses only the standard library"},
	{pkgs: "./api", allowed: []string{},
		why: "the wire types use only the standard library"},
	{pkgs: "./builds/triggers", allowed: []string{"./builds", "./secrettoken"},
		why: "trigger tokens are a concern on the core: they use builds' types and secrettoken's tokens, and builds never imports them"},
	{pkgs: "./builds/tokenguard", allowed: []string{}, forbidden: []string{"net/http"},
		why: "the admin token's check and the throttle of token guessing know neither builds nor a transport: a limiter reaches them as an interface, and handlers, the web UI and users share one guard"},
	{pkgs: "./builds/users", allowed: []string{"./builds", "./builds/tokenguard", "./secrettoken"}, forbidden: []string{"net/http"},
		why: "users and their tokens are a concern on the core: builds' types and audit log, secrettoken's tokens, their store as an interface, no transport; builds never imports them"},
	{pkgs: "./builds/pushes", allowed: []string{"./builds", "./ciconfig", "./gitref", "./periodic", "github.com/google/go-github/v84/...", "gitlab.com/gitlab-org/api/client-go/v2/..."},
		forbidden: []string{"./builds/pgstore", "./handlers", "github.com/jackc/pgx/v5/..."},
		why:       "pushes are a concern on the core: builds' types, the compiler's view of a push, the forges' own clients to read their webhooks and the shared jittered loop; their store is an interface, so never pgstore, pgx or a handler, and builds never imports them"},
	{pkgs: "./builds/schedules", allowed: []string{"./builds", "./gitref", "./periodic", "github.com/robfig/cron/v3"},
		why: "pipeline schedules are a concern on the core with a kept cron parser and the shared jittered loop; builds never imports them"},
	{pkgs: "./builds/access", allowed: []string{"./builds", "./builds/projects", "./gitref"}, forbidden: []string{"net/http"},
		why: "who may do what is a concern on the core: builds' actors and refs, projects' protected refs, its members' store as an interface; no transport, and builds never imports it"},
	{pkgs: "./builds/hooks", allowed: []string{"./builds", "./builds/forgestatus", "./builds/views", "./gitremote", "./periodic"},
		why: "webhooks and their outbox are a concern on the core: builds' types and calls, the forge statuses it sends, the durations its payloads show, the shared jittered loop and the standard library's HTTP client; builds never imports them"},
	{pkgs: "./builds/forgestatus", allowed: []string{"./builds", "github.com/google/go-github/v84/...", "gitlab.com/gitlab-org/api/client-go/v2/..."},
		why: "commit statuses go through the forges' own Go clients; builds never imports them"},
	{pkgs: "./builds/redisstore", allowed: []string{"./builds", "github.com/redis/go-redis/v9/..."},
		why: "the Redis adapter serves builds' interfaces with go-redis, nothing else"},
	{pkgs: "./objectstore", allowed: []string{"./builds", "github.com/minio/minio-go/v7/..."},
		why: "the object store adapter serves builds.ObjectStore with the standard library (a directory) and minio-go (S3), nothing else"},
	{pkgs: "./featureflags", allowed: []string{"github.com/open-feature/go-sdk/openfeature/..."},
		why: "flag keys and getters know OpenFeature only; the Postgres provider is pgflags"},
	{pkgs: "./handlers/...", forbidden: []string{"github.com/jackc/pgx/v5/...", "github.com/redis/go-redis/v9/..."},
		why: "handlers speak HTTP and call builds; storage errors reach them as builds' sentinels"},
	{pkgs: "./webui", allowed: []string{"./builds", "./builds/access", "./builds/artifacts", "./builds/joblogs", "./builds/projects", "./builds/users", "./builds/views", "./builds/runners", "./builds/auditlog", "./builds/triggers", "./builds/schedules", "./builds/tokenguard", "./oidclogin", "./cipipeline", "./ciconfig", "./environment", "./gitref", "./gitremote", "./junit", "./api", "github.com/go-chi/chi/v5/...", "github.com/buildkite/terminal-to-html/v3"},
		forbidden: []string{"github.com/jackc/pgx/v5/...", "github.com/redis/go-redis/v9/..."},
		why:       "the web UI reads and acts through builds.Service, the services beside it (artifacts, joblogs) and cipipeline.Creator (a pipeline from a ref) like the API; storage stays behind them"},
	{pkgs: "./ciconfig/...", allowed: []string{"./builds", "./ciconfig/...", "./environment", "./gitref", "go.yaml.in/yaml/v3"}, forbidden: []string{"net/http", "database/sql"},
		why: "the .gitlab-ci.yml compiler is pure: text in, builds' job definitions out, with a YAML parser; no storage, no transport"},
	{pkgs: "./cisource", allowed: []string{"./builds", "./ciconfig", "./gitref", "./gitremote"},
		why: "the include reader runs git and fetches HTTPS with the standard library, for ciconfig's Includes"},
	{pkgs: "./cipipeline", allowed: []string{"./builds", "./ciconfig", "./cisource", "./gitref"}, forbidden: []string{"net/http"},
		why: "pipelines from the repository: the ref resolved and the file read with cisource, compiled with ciconfig, stored through builds; no transport, every caller (API, triggers, schedules, pushes) brings its own"},
	{pkgs: "./idtoken", allowed: []string{"github.com/go-jose/go-jose/v4/..."},
		why: "the ID token signer and its JWKS are go-jose's, with the standard library's crypto; keys reach it as values, not from storage"},
	{pkgs: "./oidclogin", allowed: []string{"github.com/coreos/go-oidc/v3/...", "golang.org/x/oauth2/..."},
		why: "the single sign-in's relying party knows the provider through go-oidc and x/oauth2 only; users and sessions are its callers' business"},
	{pkgs: "./ciconfig/expr", allowed: []string{},
		why: "the rules:if expression language uses only the standard library"},
	{pkgs: "./gitref", allowed: []string{},
		why: "git's ref and commit id rules are a leaf that builds itself checks with: the standard library only"},
	{pkgs: "./environment", allowed: []string{},
		why: "GitLab's environment names, slugs, tiers and link rules are a leaf that builds (resource group keys) and the compiler share: the standard library only"},
	{pkgs: "./faultlog", allowed: []string{}, forbidden: []string{"net/http"},
		why: "the log of a hot path's repeated faults is a leaf builds and handlers share: the standard library only, and no transport"},
	{pkgs: "./secrettoken", allowed: []string{}, forbidden: []string{"net/http"},
		why: "random tokens and the SHA-256 they are stored as are a leaf builds and the token concerns beside it share: the standard library's crypto only, each caller brings its prefix"},
	{pkgs: "./gitremote", allowed: []string{},
		why: "a remote's credentials hidden is a leaf the API, the web UI, hooks and cisource share: the standard library only"},
	{pkgs: "./...", forbidden: []string{"./cmd/..."},
		why: "commands are leaves: what two of them share belongs in a package of its own"},
}

// TestDependencyRule checks every rule against `go list -deps` of the whole module and names
// the chain of imports that breaks one.
func TestDependencyRule(t *testing.T) {
	t.Parallel()
	graph := listDeps(t)
	for _, rule := range layerRules {
		matched := 0
		for pkg := range graph.imports {
			if !matchPattern(rule.pkgs, pkg) {
				continue
			}
			matched++
			for _, v := range rule.violations(graph, pkg) {
				t.Errorf("%s: %s\n\trule for %s: %s", rule.describe(v), chainString(v), rule.pkgs, rule.why)
			}
		}
		if matched == 0 {
			t.Errorf("rule for %s matches no package: a package was moved or renamed; update the rule", rule.pkgs)
		}
	}
}

// depGraph is the import graph of the module's packages and everything they depend on.
type depGraph struct {
	imports  map[string][]string
	standard map[string]bool
}

func listDeps(t *testing.T) depGraph {
	t.Helper()
	// Test files are left out: the rule is about what the product links.
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}}	{{.Standard}}	{{join .Imports " "}}`, "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v\n%s", err, stderr.Bytes())
	}
	g := depGraph{imports: map[string][]string{}, standard: map[string]bool{}}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) != 3 {
			t.Fatalf("go list line %q: want 3 tab-separated fields", sc.Text())
		}
		g.imports[fields[0]] = strings.Fields(fields[2])
		g.standard[fields[0]] = fields[1] == "true"
	}
	if len(g.imports) == 0 {
		t.Fatal("go list -deps ./... listed no packages")
	}
	g.standard["C"] = true // cgo's pseudo-package, imported by net and os/user under cgo
	return g
}

// violations walks pkg's imports breadth first and returns the shortest chain (pkg first)
// to each dependency the rule does not allow.
func (r layerRule) violations(g depGraph, pkg string) [][]string {
	parent := map[string]string{pkg: ""}
	queue := []string{pkg}
	var bad [][]string
	for len(queue) > 0 {
		from := queue[0]
		queue = queue[1:]
		for _, dep := range g.imports[from] {
			if _, seen := parent[dep]; seen {
				continue
			}
			parent[dep] = from
			stop := false
			switch {
			case r.isForbidden(dep):
				bad, stop = append(bad, chain(parent, dep)), true
			case r.allowed != nil && !g.standard[dep] && !r.isAllowed(dep):
				bad, stop = append(bad, chain(parent, dep)), true
			case r.allowed != nil && r.isAllowed(dep):
				stop = true // its own imports are its own business (and maybe its own rule)
			}
			if !stop {
				queue = append(queue, dep)
			}
		}
	}
	return bad
}

func (r layerRule) isForbidden(pkg string) bool {
	return slices.ContainsFunc(r.forbidden, func(p string) bool { return matchPattern(p, pkg) })
}

func (r layerRule) isAllowed(pkg string) bool {
	return slices.ContainsFunc(r.allowed, func(p string) bool { return matchPattern(p, pkg) })
}

// describe says which half of the rule the chain's last package breaks.
func (r layerRule) describe(chain []string) string {
	last := chain[len(chain)-1]
	if r.isForbidden(last) {
		return "forbidden import " + short(last)
	}
	if len(r.allowed) == 0 {
		return "import outside the standard library " + short(last)
	}
	names := make([]string, len(r.allowed))
	for i, a := range r.allowed {
		names[i] = short(a)
	}
	return "import " + short(last) + " is not the standard library or one of " + strings.Join(names, ", ")
}

// matchPattern reports whether pkg is named by pattern (see layerRule).
func matchPattern(pattern, pkg string) bool {
	if rel, ok := strings.CutPrefix(pattern, "."); ok {
		pattern = module + rel
	}
	if tree, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == tree || strings.HasPrefix(pkg, tree+"/")
	}
	return pkg == pattern
}

func chain(parent map[string]string, last string) []string {
	var c []string
	for p := last; p != ""; p = parent[p] {
		c = append(c, p)
	}
	slices.Reverse(c)
	return c
}

func chainString(c []string) string {
	names := make([]string, len(c))
	for i, p := range c {
		names[i] = short(p)
	}
	return strings.Join(names, " → ")
}

// short drops the module prefix from the module's own packages (and from patterns).
func short(pkg string) string {
	if s, ok := strings.CutPrefix(pkg, module+"/"); ok {
		return s
	}
	return strings.TrimPrefix(pkg, "./")
}
