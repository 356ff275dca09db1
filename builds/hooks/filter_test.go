package hooks

import (
	"net/netip"
	"testing"
)

func TestBranchMatches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		strategy, filter, branch string
		want                     bool
	}{
		{FilterWildcard, "", "anything", true},
		{FilterWildcard, "main", "main", true},
		{FilterWildcard, "main", "main2", false},
		{FilterWildcard, "release/*", "release/1.0", true},
		{FilterWildcard, "release/*", "release/1/rc", true},
		{FilterWildcard, "release/*", "feature/release/1", false},
		{FilterWildcard, "a.b", "axb", false}, // dots are literal
		{FilterRegex, "^(main|dev)$", "dev", true},
		{FilterRegex, "^(main|dev)$", "devel", false},
		{FilterAllBranches, "main", "other", true},
	} {
		h := Hook{BranchFilterStrategy: c.strategy, PushEventsBranchFilter: c.filter}
		if got := branchMatches(h, c.branch); got != c.want {
			t.Errorf("%s %q on %q: %v, want %v", c.strategy, c.filter, c.branch, got, c.want)
		}
	}
}

func TestLocalNetwork(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "10.0.0.1": true, "172.16.5.4": true, "192.168.1.1": true, "169.254.169.254": true,
		"100.64.0.1": true, "0.0.0.0": true, "::1": true, "fd00::1": true, "fe80::1": true, "::ffff:127.0.0.1": true,
		"64:ff9b::a00:1": true, "224.0.0.1": true,
		"8.8.8.8": false, "140.82.112.3": false, "2606:4700::1111": false,
	} {
		if got := localAddr(netip.MustParseAddr(addr)); got != want {
			t.Errorf("localAddr(%s) = %v, want %v", addr, got, want)
		}
	}
	for host, want := range map[string]bool{"localhost": true, "LOCALHOST.": true, "app.localhost": true, "[::1]": true,
		"example.com": false, "localhost.example.com": false} {
		if got := localHost(host); got != want {
			t.Errorf("localHost(%s) = %v, want %v", host, got, want)
		}
	}
}
