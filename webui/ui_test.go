package webui

import "testing"

// TestLocalPath: sign-in's next only ever leads to a path of this site; every form that a
// browser (or a proxy that decodes the path) could read as another host goes to "/".
func TestLocalPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ next, want string }{
		{"/pipelines", "/pipelines"},
		{"/runners?page=2", "/runners?page=2"},
		{"/projects/3/jobs/7/log", "/projects/3/jobs/7/log"},
		{"/", "/"},
		{"", "/"},
		{"pipelines", "/"},
		{"//evil.example", "/"},
		{"//evil.example/pipelines", "/"},
		{"/\\evil.example", "/"},
		{"\\\\evil.example", "/"},
		{"/\t/evil.example", "/"},
		{"/\n/evil.example", "/"},
		{"/\r\n/evil.example", "/"},
		{"\t//evil.example", "/"},
		{" /pipelines", "/"},
		{"/ /evil.example", "/"},
		{"/pipelines\x00", "/"},
		{"/\x7f/evil.example", "/"},
		{"/\u0085/evil.example", "/"},
		{"/\u00a0/evil.example", "/"},
		{"/%09/evil.example", "/"},
		{"/%0a/evil.example", "/"},
		{"/%2F/evil.example", "/"},
		{"/%2f/evil.example", "/"},
		{"/%5C/evil.example", "/"},
		{"/%zz", "/"},
		{"https://evil.example", "/"},
		{"http:/evil.example", "/"},
		{"javascript:alert(1)", "/"},
		{"/pipelines\t", "/"},
	} {
		if got := localPath(tc.next); got != tc.want {
			t.Errorf("localPath(%q) = %q, want %q", tc.next, got, tc.want)
		}
	}
}

// TestNoticesAreFixed: ?notice= shows one of the fixed messages, never the query's text.
func TestNoticesAreFixed(t *testing.T) {
	t.Parallel()
	if got := noticeText("runner_paused"); got != notices["runner_paused"] || got == "" {
		t.Errorf("known code: %q", got)
	}
	for _, code := range []string{"Your token expired: send it to evil@example.com", "runner_paused ", "<b>x</b>"} {
		if got := noticeText(code); got != "" {
			t.Errorf("noticeText(%q) = %q, want nothing", code, got)
		}
	}
}
