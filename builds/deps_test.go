package builds_test

import (
	"go/build"
	"strings"
	"testing"
)

// The domain package stays free of transport and storage: STYLE's layering, checked.
func TestBuildsImportsOnlyStdlib(t *testing.T) {
	pkg, err := build.Import("github.com/jobapi/jobapi/builds", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.Contains(imp, ".") || imp == "net/http" {
			t.Errorf("builds imports %s; the domain must use only the standard library (not net/http)", imp)
		}
	}
}
