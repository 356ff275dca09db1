package ciconfig

import (
	"strings"
	"testing"

	"github.com/jobapi/jobapi/environment"
)

// TestEnvironmentURLIsWeb: environment:url is an http(s) URL, as written or once its
// variables are expanded; anything else (javascript:, data:, a scheme-relative or
// whitespace-split URL) is refused naming the job and the key.
func TestEnvironmentURLIsWeb(t *testing.T) {
	t.Parallel()
	for _, url := range []string{
		"javascript:alert(document.cookie)",
		"JavaScript:alert(1)",
		"data:text/html,<script>alert(1)</script>",
		"//evil.example/",
		"ftp://files.example.com/",
		"https://",
		"java\tscript:alert(1)",
		"$HOOK",         // expands to javascript:
		"${HOOK}/x",     // expands to javascript:…/x
		"$UNSET",        // expands to "" + nothing: empty is no url, accepted below
		"javascript:$X", // refused as written, before any expansion
	} {
		src := "variables:\n  HOOK: 'javascript:alert(1)'\ndeploy:\n  script: x\n  environment:\n    name: prod\n    url: '" + strings.ReplaceAll(url, "'", "''") + "'\n"
		res, err := Compile([]byte(src), mainPush)
		if url == "$UNSET" {
			if err != nil || job(t, res, "deploy").Environment.URL != "" {
				t.Errorf("url %q: %v, want an environment without url", url, err)
			}
			continue
		}
		e, ok := err.(*Error)
		if !ok || e.Job != "deploy" || e.Key != "environment:url" {
			t.Errorf("url %q: %v (%#v), want an error on jobs:deploy:environment:url", url, err, err)
		}
	}
	res := mustCompile(t, "variables:\n  HOST: app.example.com\ndeploy:\n  script: x\n  environment:\n    name: prod\n    url: https://$HOST/path\n", mainPush)
	if got := job(t, res, "deploy").Environment.URL; got != "https://app.example.com/path" {
		t.Errorf("https url: %q", got)
	}
	for _, ok := range []string{"http://a.example", "HTTPS://A.EXAMPLE/x?y=1"} {
		if !environment.IsWebURL(ok) {
			t.Errorf("IsWebURL(%q) = false", ok)
		}
	}
}
