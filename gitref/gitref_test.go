package gitref

import (
	"errors"
	"strings"
	"testing"
)

// TestCheckName: git check-ref-format's rules, with a ref that git could take for an
// option refused too.
func TestCheckName(t *testing.T) {
	for _, s := range []string{"main", "feature/x", "refs/tags/v1.0", "refs/heads/main", "v1.2.3", "release-1.0",
		"v1_2", "HEAD", "fix/ünïcode", "a-", "a@b", "x.locked", strings.Repeat("a", 255)} {
		if err := CheckName("ref", s); err != nil {
			t.Errorf("CheckName(%q) = %v, want ok", s, err)
		}
	}
	for _, s := range []string{"", "-x", "--upload-pack=touch /tmp/x;git-upload-pack", "a..b", "a@{1}", "@",
		"a\x00b", "a\x01b", "a\x7fb", "a\tb", "a\nb", "x.lock", "a/b.lock/c", "a//b", "/a", "a/", "a b",
		"a~1", "a^", "a:b", "a?", "a*", "a[b", `a\b`, ".a", "a/.b", "a.", "a/b.", "refs/heads/-x",
		strings.Repeat("a", 256)} {
		err := CheckName("ref", s)
		var e *Error
		if !errors.As(err, &e) || !strings.HasPrefix(e.Msg, "ref ") {
			t.Errorf("CheckName(%q) = %v, want an Error naming ref", s, err)
		}
	}
}

func TestCheckRevisions(t *testing.T) {
	sha := strings.Repeat("a", 40)
	if err := CheckRevisions("", "", ""); err != nil {
		t.Errorf("nothing given: %v", err)
	}
	if err := CheckRevisions("refs/tags/v1.0", sha, strings.Repeat("0", 40)); err != nil {
		t.Errorf("a tag, a sha and no before_sha: %v", err)
	}
	for _, c := range []struct{ ref, sha, before, field string }{
		{"--upload-pack=x", sha, "", "ref"},
		{"main", "--upload-pack=id>/tmp/Y;git-upload-pack", "", "sha"},
		{"main", strings.ToUpper(sha), "", "sha"},
		{"main", sha[:39], "", "sha"},
		{"main", "", "-x", "before_sha"},
		{"main", "", "HEAD", "before_sha"},
	} {
		err := CheckRevisions(c.ref, c.sha, c.before)
		var e *Error
		if !errors.As(err, &e) || !strings.HasPrefix(e.Msg, c.field+" ") {
			t.Errorf("CheckRevisions(%q, %q, %q) = %v, want an Error naming %s", c.ref, c.sha, c.before, err, c.field)
		}
	}
}
