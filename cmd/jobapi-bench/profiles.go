package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"

	"github.com/google/pprof/profile"
)

// labelKey is the pprof label that tells whose a CPU sample is: "server" (every goroutine of
// the in-process jobapi), "loadgen" (the runners the bench plays), "bench" (seeding and
// checks); unlabelled samples are the Go runtime's (GC, scheduler) for the whole process.
const labelKey = "jobapi_bench"

// saveProfile keeps a scenario's CPU profile in --profile-dir.
func (e *env) saveProfile(name string, data []byte) {
	if path := e.saveFile(name+".cpu.pprof", data); path != "" {
		e.logf("%s: CPU profile in %s (jobapi only: go tool pprof -tagfocus=%s=server %s)", name, path, labelKey, path)
	}
}

// saveFile writes a file into --profile-dir and returns its path ("" when not written).
func (e *env) saveFile(name string, data []byte) string {
	if e.cfg.ProfileDir == "" || len(data) == 0 {
		return ""
	}
	if err := os.MkdirAll(e.cfg.ProfileDir, 0o755); err != nil {
		e.logf("profile: %v", err)
		return ""
	}
	path := filepath.Join(e.cfg.ProfileDir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		e.logf("profile: %v", err)
		return ""
	}
	return path
}

// cpuByLabel sums a CPU profile's samples (seconds) by the value of one pprof label; samples
// without it are under "".
func cpuByLabel(gz []byte, key string) (map[string]float64, error) {
	p, err := profile.Parse(bytes.NewReader(gz))
	if err != nil {
		return nil, err
	}
	cpu := -1
	for i, t := range p.SampleType {
		if t.Type == "cpu" && t.Unit == "nanoseconds" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, errors.New("profile has no cpu sample type in nanoseconds")
	}
	out := map[string]float64{}
	for _, s := range p.Sample {
		role := ""
		if v := s.Label[key]; len(v) > 0 {
			role = v[0]
		}
		out[role] += float64(s.Value[cpu]) / 1e9
	}
	return out, nil
}
