package handlers

import "testing"

// TestEncodeRefSlashes: an artifacts-by-ref path whose ref has unencoded slashes gets them
// encoded, the ref ending at the first /raw/ or before a final /download; every other path
// is left alone.
func TestEncodeRefSlashes(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string]string{
		"/api/v4/projects/1/jobs/artifacts/feature/x/download":         "/api/v4/projects/1/jobs/artifacts/feature%2Fx/download",
		"/api/v4/projects/1/jobs/artifacts/a/b/c/raw/out/VERSION":      "/api/v4/projects/1/jobs/artifacts/a%2Fb%2Fc/raw/out/VERSION",
		"/api/v4/projects/1/jobs/artifacts/feature/x/raw/bin/download": "/api/v4/projects/1/jobs/artifacts/feature%2Fx/raw/bin/download",
		"/api/v4/projects/app%2Fx/jobs/artifacts/release/1.0/download": "/api/v4/projects/app%2Fx/jobs/artifacts/release%2F1.0/download",
		"/api/v4/projects/1/jobs/artifacts/main/download":              "",
		"/api/v4/projects/1/jobs/artifacts/feature%2Fx/download":       "",
		"/api/v4/projects/1/jobs/artifacts/main/raw/out/VERSION":       "",
		"/api/v4/projects/1/jobs/7/artifacts/out/VERSION":              "",
		"/api/v4/projects/1/jobs/artifacts/feature/x":                  "",
		"/api/v4/projects//jobs/artifacts/feature/x/download":          "",
		"/api/v4/projects/1/pipelines/7/jobs":                          "",
		"/":                                                            "",
	} {
		got, ok := encodeRefSlashes(raw)
		if ok != (want != "") || got != want {
			t.Errorf("%s: %q %v, want %q", raw, got, ok, want)
		}
	}
}
