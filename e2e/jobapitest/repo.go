package jobapitest

import (
	"os"
	"path/filepath"
	"testing"
)

// ModuleRoot returns the directory that holds jobapi's go.mod, for tests that read a file of
// the repository (openapi.yaml) or build one of its commands. It walks up from the working
// directory (go test runs a test in its package's folder), so a suite finds the root however
// deep it sits.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's working directory")
		}
		dir = parent
	}
}
