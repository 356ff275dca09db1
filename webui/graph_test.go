package webui

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
)

type point struct{ x, y float64 }

// pathPoints samples an SVG path of M, C and L commands (what route writes) every few
// pixels.
func pathPoints(t *testing.T, d string) []point {
	t.Helper()
	var out []point
	var cur point
	f := strings.Fields(d)
	num := func(i int) float64 {
		v, err := strconv.ParseFloat(strings.TrimLeft(f[i], "MCL"), 64)
		if err != nil {
			t.Fatalf("path %q: %v", d, err)
		}
		return v
	}
	for i := 0; i < len(f); {
		switch f[i][0] {
		case 'M':
			cur = point{num(i), num(i + 1)}
			out = append(out, cur)
			i += 2
		case 'L':
			to := point{num(i), num(i + 1)}
			for s := 1; s <= 100; s++ {
				k := float64(s) / 100
				out = append(out, point{cur.x + (to.x-cur.x)*k, cur.y + (to.y-cur.y)*k})
			}
			cur = to
			i += 2
		case 'C':
			c1, c2, to := point{num(i), num(i + 1)}, point{num(i + 2), num(i + 3)}, point{num(i + 4), num(i + 5)}
			for s := 1; s <= 100; s++ {
				k := float64(s) / 100
				a, b, c, e := (1-k)*(1-k)*(1-k), 3*(1-k)*(1-k)*k, 3*(1-k)*k*k, k*k*k
				out = append(out, point{a*cur.x + b*c1.x + c*c2.x + e*to.x, a*cur.y + b*c1.y + c*c2.y + e*to.y})
			}
			cur = to
			i += 6
		default:
			t.Fatalf("path %q: unexpected %q", d, f[i])
		}
	}
	return out
}

// TestEdgesAvoidCards: no needs edge passes over or under a card it does not connect, in a
// pipeline where straight curves did (build → package crossed the test stage's cards), and
// every edge starts at its need's right edge and ends at its dependant's left edge.
func TestEdgesAvoidCards(t *testing.T) {
	t.Parallel()
	need := func(names ...string) builds.Payload {
		p := builds.Payload{NeedsDeclared: true}
		for _, n := range names {
			p.Needs = append(p.Needs, builds.Need{Job: n})
		}
		return p
	}
	p := builds.Pipeline{ID: 1, ProjectID: 1, Stages: []string{"build", "test", "package", "deploy"}, Status: "running", CreatedAt: time.Now()}
	add := func(stage, name string, payload builds.Payload) {
		p.Builds = append(p.Builds, builds.Build{ID: int64(len(p.Builds) + 1), ProjectID: 1, Stage: stage, Name: name, Status: builds.StatusCreated, Payload: payload})
	}
	add("build", "build", builds.Payload{})
	add("build", "docs", builds.Payload{})
	add("build", "assets", builds.Payload{})
	add("test", "unit 1/2", need("build"))
	add("test", "unit 2/2", need("build"))
	add("test", "lint", need("build", "docs"))
	add("test", "self-check", need("lint"))
	add("package", "package", need("build"))
	add("package", "bundle", need("assets", "unit 2/2"))
	add("deploy", "ship", need("package", "docs", "assets", "unit 1/2"))
	add("deploy", "notes", need("docs"))

	d := buildPipelineData(p, nil, time.Now())
	cards := map[int64]jobCard{}
	for _, col := range d.Stages {
		for _, c := range col.Jobs {
			cards[c.ID] = c
		}
	}
	if len(d.Edges) != 13 {
		t.Fatalf("%d edges, want 13", len(d.Edges))
	}
	for _, e := range d.Edges {
		from, to := cards[e.From], cards[e.To]
		pts := pathPoints(t, e.Path)
		name := fmt.Sprintf("edge %s → %s (%s)", from.Name, to.Name, e.Path)
		if first := pts[0]; first != (point{float64(from.X + cardW), float64(from.Y + cardH/2)}) {
			t.Errorf("%s starts at %v", name, first)
		}
		wantEnd := point{float64(to.X), float64(to.Y + cardH/2)}
		if to.X == from.X {
			wantEnd.x += cardW // a need in its own column enters from the right
		}
		if last := pts[len(pts)-1]; last != wantEnd {
			t.Errorf("%s ends at %v, want %v", name, last, wantEnd)
		}
		for _, c := range cards {
			if c.ID == e.From || c.ID == e.To {
				continue
			}
			for _, pt := range pts {
				if pt.x > float64(c.X) && pt.x < float64(c.X+cardW) && pt.y > float64(c.Y) && pt.y < float64(c.Y+cardH) {
					t.Errorf("%s passes under %s at (%.0f, %.0f)", name, c.Name, pt.x, pt.y)
					break
				}
			}
		}
		for _, pt := range pts {
			if pt.x < 0 || pt.y < 0 || pt.x > float64(d.Width) || pt.y > float64(d.Height) {
				t.Errorf("%s leaves the graph at (%.0f, %.0f)", name, pt.x, pt.y)
				break
			}
		}
	}
}
