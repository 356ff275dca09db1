package featureflags_test

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package root a leaf that every layer may import: stdlib and the
// OpenFeature SDK only. Provider code with drivers lives in subpackages.
func TestImports(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			stdlib := !strings.Contains(strings.SplitN(path, "/", 2)[0], ".")
			if !stdlib && !strings.HasPrefix(path, "github.com/open-feature/go-sdk/") {
				t.Errorf("%s imports %s: featureflags may import only stdlib and openfeature", name, path)
			}
		}
	}
}
