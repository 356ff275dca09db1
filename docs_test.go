package jobapi_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinksResolve: README.md is the front door and docs/ holds the rest, with links
// between them; a section renamed or moved must not leave a link behind that lands nowhere.
// Every relative link of README.md, e2e/README.md and docs/*.md must name a file that exists
// and, with a #fragment, a heading of that file (GitHub's anchors).
func TestDocLinksResolve(t *testing.T) {
	pages, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	pages = append([]string{"README.md", "e2e/README.md"}, pages...)
	anchors := map[string]map[string]bool{}
	checked := 0
	for _, page := range pages {
		_, links := readMarkdown(t, page)
		for _, l := range links {
			if regexp.MustCompile(`^[a-z]+:`).MatchString(l.target) {
				continue // an absolute URL
			}
			checked++
			path, frag, _ := strings.Cut(l.target, "#")
			target := page
			if path != "" {
				target = filepath.Join(filepath.Dir(page), path)
			}
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s:%d: link %s: %v", page, l.line, l.target, err)
				continue
			}
			if frag == "" {
				continue
			}
			if anchors[target] == nil {
				anchors[target], _ = readMarkdown(t, target)
			}
			if !anchors[target][frag] {
				t.Errorf("%s:%d: link %s: %s has no heading with the anchor #%s", page, l.line, l.target, target, frag)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found in README.md and docs/: the walk is broken")
	}
}

type mdLink struct {
	line   int
	target string
}

var mdLinkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// readMarkdown returns the anchors of a Markdown file's headings and its links, code blocks
// left out.
func readMarkdown(t *testing.T, path string) (map[string]bool, []mdLink) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	anchors, seen := map[string]bool{}, map[string]int{}
	var links []mdLink
	fence := false
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if fence {
			continue
		}
		if h, ok := headingText(line); ok {
			a := anchorOf(h)
			if k := seen[a]; k > 0 {
				anchors[a+"-"+strconv.Itoa(k)] = true
			} else {
				anchors[a] = true
			}
			seen[a]++
		}
		for _, m := range mdLinkRE.FindAllStringSubmatch(line, -1) {
			links = append(links, mdLink{n, m[1]})
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return anchors, links
}

func headingText(line string) (string, bool) {
	hashes := len(line) - len(strings.TrimLeft(line, "#"))
	if hashes == 0 || hashes > 6 || !strings.HasPrefix(line[hashes:], " ") {
		return "", false
	}
	return strings.TrimSpace(line[hashes:]), true
}

// anchorOf is GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes.
func anchorOf(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// TestLayoutNamesEveryPackage: docs/layout.md is where a newcomer learns what each package
// holds and may import, so a package added or moved must get its line there.
func TestLayoutNamesEveryPackage(t *testing.T) {
	t.Parallel()
	layout, err := os.ReadFile("docs/layout.md")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "list", "./...").Output()
	if err != nil {
		t.Fatalf("go list ./...: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(strings.TrimPrefix(pkg, module), "/")
		if rel == "" {
			rel = module // the module root is named by its import path
		}
		if !strings.Contains(string(layout), "`"+rel+"`") {
			t.Errorf("docs/layout.md does not name the package `%s`: add a line for it (what it holds, what it may import)", rel)
		}
	}
}
