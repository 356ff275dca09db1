package access

import (
	"os"
	"strings"
	"testing"
)

// TestPermissionTableDocMatchesCode: README.md's table of who may do what is TableMarkdown(),
// so that the page cannot promise a role more, or less, than the check enforces.
func TestPermissionTableDocMatchesCode(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "<!-- permissions -->\n")
	got, _, closed := strings.Cut(after, "<!-- /permissions -->")
	if !ok || !closed {
		t.Fatal("README.md has no <!-- permissions --> … <!-- /permissions --> block")
	}
	if want := TableMarkdown(); got != want {
		t.Errorf("README.md's permission table differs from access.TableMarkdown(); paste this:\n%s", want)
	}
}
