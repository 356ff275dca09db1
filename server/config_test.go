package server_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jobapi/jobapi/server"
)

// docs/configuration.md's table is the operator's reference; server.Settings is what
// LoadConfig reads and `jobapi config` prints. They drifted once (7 settings missing from
// the documentation), so the table must match the list row for row: same variables, in the same
// order, with the same defaults and meanings.
func TestConfigurationDocMatchesSettings(t *testing.T) {
	readme, err := os.ReadFile("../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	got, err := settingsTable(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	want := make([]string, len(server.Settings))
	for i, s := range server.Settings {
		want[i] = settingsRow(s)
	}
	if strings.Join(got, "\n") == strings.Join(want, "\n") {
		return
	}
	for i := 0; i < max(len(got), len(want)); i++ {
		var g, w string
		if i < len(got) {
			g = got[i]
		}
		if i < len(want) {
			w = want[i]
		}
		if g != w {
			t.Errorf("docs/configuration.md settings table, row %d:\n  got  %s\n  want %s", i+1, g, w)
		}
	}
	t.Logf("the table server.Settings gives (paste it into docs/configuration.md):\n%s\n%s", settingsHeader, strings.Join(want, "\n"))
}

const settingsHeader = "| variable | default | meaning |\n|---|---|---|"

func settingsRow(s server.Setting) string {
	def := s.Default
	if def == "" {
		def = "(none)"
	}
	return fmt.Sprintf("| `%s` | `%s` | %s |", s.Env, def, s.Meaning)
}

// settingsTable returns the rows of the document's table that follows settingsHeader, up to
// the first line that is not a table row.
func settingsTable(readme string) ([]string, error) {
	_, after, ok := strings.Cut(readme, settingsHeader+"\n")
	if !ok {
		return nil, fmt.Errorf("docs/configuration.md has no settings table (a line %q)", strings.SplitN(settingsHeader, "\n", 2)[0])
	}
	var rows []string
	for _, line := range strings.Split(after, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		rows = append(rows, line)
	}
	return rows, nil
}
