package hooks

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// A hook URL is chosen by whoever may edit a project, and jobapi sends to it from inside
// the network it runs in: pointed at 127.0.0.1, 10.0.0.5 or a cloud's metadata address, a
// webhook would let that person reach what only jobapi can (SSRF). So, unless the operator
// allows the local network (GitLab's "Allow requests to the local network from webhooks"),
// every connection is checked where it is made: the dialer refuses a loopback, private,
// link-local, shared (CGNAT), unspecified or multicast address after DNS resolved the name,
// so neither a name that resolves there (DNS rebinding included) nor a redirect reaches it;
// and redirects are not followed at all (a 3xx is a failed delivery, as on GitLab).

// ErrLocalNetwork is the refusal of an address on the local network.
var ErrLocalNetwork = errors.New("requests to the local network are not allowed")

// blockedPrefixes are the ranges beyond net.IP's own loopback/private/link-local tests.
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"), // shared address space (CGNAT)
	netip.MustParsePrefix("0.0.0.0/8"),     // "this network"
	netip.MustParsePrefix("192.0.0.0/24"),  // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"), // benchmarking
	netip.MustParsePrefix("64:ff9b::/96"),  // NAT64 of any IPv4 address, private ones too
}

// localAddr reports whether ip is on the local network in the sense above.
func localAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// localHost reports whether a URL's host is known to be local without resolving it: an
// address on the local network or a localhost name. Other names are checked when dialed.
func localHost(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	if ip, err := netip.ParseAddr(strings.Trim(h, "[]")); err == nil {
		return localAddr(ip)
	}
	return false
}

// guardControl is the dialer's check of the address it is about to connect to.
func guardControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, err)
	}
	if localAddr(ap.Addr()) {
		return fmt.Errorf("%s: %w", ap.Addr(), ErrLocalNetwork)
	}
	return nil
}

// NewClient returns the HTTP client that sends hooks and forge statuses: timeout bounds
// each request, redirects are never followed, and, unless allowLocal, no connection is
// made to the local network. insecure skips TLS verification (a hook's
// enable_ssl_verification false).
func NewClient(timeout time.Duration, allowLocal, insecure bool) *http.Client {
	d := &net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second}
	if !allowLocal {
		d.Control = guardControl
	}
	tr := &http.Transport{
		// No proxy from the environment: a proxy would make the connection the dialer
		// checks one to the proxy, not to the hook's host.
		Proxy:                 nil,
		DialContext:           d.DialContext,
		TLSHandshakeTimeout:   min(timeout, 10*time.Second),
		ResponseHeaderTimeout: timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	if insecure {
		tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the hook's own enable_ssl_verification: false
	}
	return &http.Client{
		Transport: tr,
		Timeout:   timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
