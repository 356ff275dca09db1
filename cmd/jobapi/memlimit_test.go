package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

func TestContainerMemoryLimit(t *testing.T) {
	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })
	dir := t.TempDir()
	n := 0
	write := func(content string) string {
		n++
		p := filepath.Join(dir, fmt.Sprintf("memory.max.%d", n))
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noEnv := func(string) string { return "" }

	// A 512 MiB container: the runtime gets 90% of it.
	limit := containerMemoryLimit(noEnv, write("536870912\n"))
	if want := int64(483183820); limit != want || debug.SetMemoryLimit(-1) != want {
		t.Errorf("512 MiB container: limit %d, runtime's %d; want %d", limit, debug.SetMemoryLimit(-1), want)
	}
	debug.SetMemoryLimit(before)

	for name, c := range map[string]struct {
		getenv func(string) string
		path   string
	}{
		"no container limit (max)": {noEnv, write("max\n")},
		"no cgroup file":           {noEnv, filepath.Join(dir, "absent")},
		"GOMEMLIMIT set by the operator": {func(k string) string {
			if k == "GOMEMLIMIT" {
				return "1GiB"
			}
			return ""
		}, write("536870912\n")},
	} {
		if limit := containerMemoryLimit(c.getenv, c.path); limit != 0 || debug.SetMemoryLimit(-1) != before {
			t.Errorf("%s: limit %d, runtime's %d; want none set (%d)", name, limit, debug.SetMemoryLimit(-1), before)
		}
	}
}
