package cisource

import (
	"context"
	"strings"
	"testing"
)

// TestGitCacheRedactsEveryRemoteForm: git prints a remote's credentials in forms other than
// the URL as given (git:// as "user:secret@host:port"): no message carries them.
func TestGitCacheRedactsEveryRemoteForm(t *testing.T) {
	t.Parallel()
	g, err := NewGitCache(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sha := strings.Repeat("a", 40)
	for _, remote := range []string{
		"git://user:secret@127.0.0.1:1/x.git",
		"ssh://user:secret@127.0.0.1:1/x.git",
		"http://user:secret@127.0.0.1:1/x.git",
		"https://secret@127.0.0.1:1/x.git",
		"user:secret@127.0.0.1:x.git",
	} {
		_, err := g.Read(context.Background(), remote, sha, "a.yml")
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: %v; want an error without the secret", remote, err)
		}
		_, err = g.Changed(context.Background(), remote, "main", sha)
		if err == nil || strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: Changed: %v; want an error without the secret", remote, err)
		}
	}
}
