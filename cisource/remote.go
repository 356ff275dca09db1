package cisource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
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

// NewRemote returns a Remote that refuses loopback, private and link-local addresses, so
// that a pipeline cannot make the server read its own network.
func NewRemote() *Remote {
	dialer := &net.Dialer{Timeout: RemoteTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip := net.ParseIP(host)
		if ip == nil || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
			ip.IsUnspecified() || ip.IsMulticast() {
			return errLocalAddress
		}
		return nil
	}}
	transport := &http.Transport{DialContext: dialer.DialContext, TLSHandshakeTimeout: RemoteTimeout,
		ResponseHeaderTimeout: RemoteTimeout, ForceAttemptHTTP2: true}
	return &Remote{Client: &http.Client{Transport: transport}}
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

func (p *Files) Remote(u string) ([]byte, error) {
	if p.s.Remote == nil {
		return nil, &ciconfig.IncludeError{Message: "remote includes are off"}
	}
	return p.s.Remote.Fetch(p.ctx, u)
}
