package cisource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"

	"github.com/jobapi/jobapi/ciconfig"
)

// RemoteTimeout is how long one remote include may take, connection to last byte.
const RemoteTimeout = 10 * time.Second

// errLocalAddress refuses addresses a remote include must not reach from the server
// (GitLab refuses local network requests by default too).
var errLocalAddress = errors.New("the address is in a local or private network")

// Remote fetches `include: remote` files over HTTPS.
type Remote struct {
	Client *http.Client
}

// NewRemote returns a Remote that connects only to global unicast addresses (allowedRemote),
// checked at dial time, so that a pipeline cannot make the server read its own network
// through a name that resolves there, a DNS answer that changes, or a redirect.
func NewRemote() *Remote {
	dialer := &net.Dialer{Timeout: RemoteTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return err
		}
		if !allowedRemote(ap.Addr(), ownAddresses()) {
			return errLocalAddress
		}
		return nil
	}}
	transport := &http.Transport{DialContext: dialer.DialContext, TLSHandshakeTimeout: RemoteTimeout,
		ResponseHeaderTimeout: RemoteTimeout, ForceAttemptHTTP2: true}
	return &Remote{Client: &http.Client{Transport: transport}}
}

// notGlobal are the special-purpose ranges (IANA's registries) that netip's
// IsGlobalUnicast and IsPrivate leave as global, though no public server is there: shared
// address space (carrier NAT), IETF protocol assignments, documentation, benchmarking,
// reserved, NAT64 (which reaches any IPv4 address through a translator, the host's own
// network included), IPv6 protocol assignments (all of 2001::/23, some of it global: the
// safe side), documentation, ULA.
var notGlobal = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.0.2.0/24"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("198.51.100.0/24"),
	netip.MustParsePrefix("203.0.113.0/24"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001::/23"),
	netip.MustParsePrefix("2001:db8::/32"),
	netip.MustParsePrefix("2002::/16"), // 6to4: an IPv4 address inside
	netip.MustParsePrefix("fc00::/7"),
}

// allowedRemote says whether a remote include may connect to ip: a global unicast address,
// not private, not in a special-purpose range, and none of the host's own (own). An IPv4
// address written in IPv6 (mapped ::ffff:a.b.c.d or compatible ::a.b.c.d) is judged as the
// IPv4 address it is.
func allowedRemote(ip netip.Addr, own []netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	if b := ip.As16(); ip.Is6() && [12]byte(b[:12]) == [12]byte{} {
		ip = netip.AddrFrom4([4]byte(b[12:])) // IPv4-compatible (deprecated), ::/96
	}
	if !ip.IsValid() || !ip.IsGlobalUnicast() || ip.IsPrivate() {
		return false
	}
	for _, p := range notGlobal {
		if p.Contains(ip) {
			return false
		}
	}
	for _, a := range own {
		if a.Unmap() == ip {
			return false
		}
	}
	return true
}

// ownAddresses lists the addresses of the host's interfaces, read at each dial (they change).
func ownAddresses() []netip.Addr {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr())
		}
	}
	return out
}

// Fetch returns the body of an https URL of at most ciconfig.MaxConfigBytes, within
// RemoteTimeout; what goes wrong is a *ciconfig.IncludeError for the user.
func (r *Remote) Fetch(ctx context.Context, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, RemoteTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, &ciconfig.IncludeError{Message: "not a valid URL"}
	}
	client := *r.Client
	client.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if req.URL.Scheme != "https" {
			return errors.New("redirected to a URL that is not https")
		}
		if len(via) >= 3 {
			return errors.New("redirected more than 3 times")
		}
		return nil
	}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, &ciconfig.IncludeError{Message: fmt.Sprintf("could not be fetched: %v", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, &ciconfig.IncludeError{Message: fmt.Sprintf("could not be fetched: HTTP %d", resp.StatusCode)}
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, ciconfig.MaxConfigBytes+1))
	if err != nil {
		return nil, &ciconfig.IncludeError{Message: fmt.Sprintf("could not be fetched: %v", err)}
	}
	if len(body) > ciconfig.MaxConfigBytes {
		return nil, &ciconfig.IncludeError{Message: fmt.Sprintf("the file is larger than %d bytes (1 MiB)", ciconfig.MaxConfigBytes)}
	}
	return body, nil
}

// Source gives the ciconfig.Includes of one pipeline.
type Source struct {
	Git    *GitCache // nil: include:local is refused
	Remote *Remote
}

// For returns what the compiler reads a pipeline's includes and repository through (its
// Includes and Repository): the repository at remote ("" when the project has none) at
// rev, within ctx.
func (s *Source) For(ctx context.Context, remote, rev string) *Files {
	return &Files{ctx: ctx, s: s, remote: remote, rev: rev}
}

// Files is one pipeline's ciconfig.Includes and ciconfig.Repository.
type Files struct {
	ctx         context.Context
	s           *Source
	remote, rev string
}

var (
	_ ciconfig.Includes   = (*Files)(nil)
	_ ciconfig.Repository = (*Files)(nil)
)

// usable says why the repository cannot be read, or nil.
func (p *Files) usable() error {
	if p.s.Git == nil || p.remote == "" {
		return &ciconfig.IncludeError{Message: "the project has no repository to read it from (repo_url)"}
	}
	if p.rev == "" {
		return &ciconfig.IncludeError{Message: "the pipeline has neither a sha nor a ref to read it at"}
	}
	return nil
}

func (p *Files) Local(path string) ([]byte, error) {
	if err := p.usable(); err != nil {
		return nil, err
	}
	return p.s.Git.Read(p.ctx, p.remote, p.rev, path)
}

func (p *Files) LocalPaths() ([]string, error) {
	if err := p.usable(); err != nil {
		return nil, err
	}
	return p.s.Git.List(p.ctx, p.remote, p.rev)
}

// Paths lists the files at the pipeline's commit, for rules:exists.
func (p *Files) Paths() ([]string, error) { return p.LocalPaths() }

// Changed lists the files changed between base and the pipeline's commit.
func (p *Files) Changed(base string) ([]string, error) {
	if err := p.usable(); err != nil {
		return nil, err
	}
	return p.s.Git.Changed(p.ctx, p.remote, p.rev, base)
}

// MergeBase is the merge base of rev (compare_to) and the pipeline's commit.
func (p *Files) MergeBase(rev string) (string, error) {
	if err := p.usable(); err != nil {
		return "", err
	}
	return p.s.Git.MergeBase(p.ctx, p.remote, p.rev, rev)
}

// BlobIDs are the git object ids of files at the pipeline's commit, for cache:key:files.
func (p *Files) BlobIDs(paths []string) ([]string, error) {
	if err := p.usable(); err != nil {
		return nil, err
	}
	return p.s.Git.BlobIDs(p.ctx, p.remote, p.rev, paths)
}

// LastCommit is the latest commit that changed path, for cache:key:files_commits.
func (p *Files) LastCommit(path string) (string, error) {
	if err := p.usable(); err != nil {
		return "", err
	}
	return p.s.Git.LastCommit(p.ctx, p.remote, p.rev, path)
}

func (p *Files) Remote(u string) ([]byte, error) {
	if p.s.Remote == nil {
		return nil, &ciconfig.IncludeError{Message: "remote includes are off"}
	}
	return p.s.Remote.Fetch(p.ctx, u)
}
