package gitremote

import "testing"

func TestRedact(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"https://user:pass@host/r.git", "https://*****:*****@host/r.git"},
		{"https://glpat-token@host/r.git", "https://*****@host/r.git"},
		{"http://u:p@10.0.0.1:8080/r.git", "http://*****:*****@10.0.0.1:8080/r.git"},
		{"https://host/r.git", "https://host/r.git"},
		{"ssh://git@host:2222/r.git", "ssh://git@host:2222/r.git"},
		{"ssh://git:pw@host/r.git", "ssh://git:*****@host/r.git"},
		{"git@host:grp/r.git", "git@host:grp/r.git"},
		{"user:secret@host:grp/r.git", "user:*****@host:grp/r.git"},
		{"git://user:secret@127.0.0.1:1/x.git", "git://user:*****@127.0.0.1:1/x.git"},
		{"file:///srv/r.git", "file:///srv/r.git"},
		{"", ""},
	} {
		if got := Redact(c.in); got != c.want {
			t.Errorf("Redact(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
