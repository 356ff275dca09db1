package localserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgresLibDirs is where Debian and Ubuntu install Postgres, one directory per version.
const postgresLibDirs = "/usr/lib/postgresql/*/bin"

// Postgres is a throwaway Postgres server owned by this process.
type Postgres struct {
	// URL connects as the superuser postgres to the database postgres, no password.
	URL string
	// Dir holds the cluster in Dir/data and the server's unix socket.
	Dir string

	removeDir bool
	// What started the server, reused by Restart.
	bin  string
	args []string
	cred *syscall.Credential
	log  io.Writer

	mu   sync.Mutex
	proc *process
}

// StartPostgres initialises a cluster in dir (a new temporary directory if dir is "";
// an existing cluster in dir/data is reused) and starts a server on a free 127.0.0.1 port,
// returning once it accepts connections. It is tuned for tests: fsync is off, so a machine
// crash can lose its data. When the caller is root it runs as the OS user postgres, because
// initdb and postgres refuse to run as root; dir and its parents must then be reachable by
// that user (a directory under /tmp is).
func StartPostgres(ctx context.Context, dir string, log io.Writer) (*Postgres, error) {
	if log == nil {
		log = io.Discard
	}
	initdb, err := findBinary("initdb", postgresLibDirs)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w (install the postgresql package)", err)
	}
	postgres, err := postgresNextTo(initdb)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	cred, err := postgresCredential()
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	dir, created, err := makeDir(dir, "jobapi-postgres-")
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	pg, err := startPostgres(ctx, initdb, postgres, dir, cred, log)
	if err != nil {
		if created {
			os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("start postgres in %s: %w", dir, err)
	}
	pg.removeDir = created
	return pg, nil
}

func startPostgres(ctx context.Context, initdb, postgres, dir string, cred *syscall.Credential, log io.Writer) (*Postgres, error) {
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
		if err := reachableBy(dir, cred); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		cmd := exec.CommandContext(ctx, initdb, "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-locale", "--no-sync")
		cmd.Dir = dir // the caller's working directory may be closed to the postgres user
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		out, err := cmd.CombinedOutput()
		log.Write(out)
		if err != nil {
			return nil, fmt.Errorf("initdb: %w\n%s", err, out)
		}
	}

	// A port picked free can be taken before postgres binds it: try another one.
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			return nil, err
		}
		args := []string{
			"-D", data,
			"-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=" + dir,
			// Durability buys nothing for throwaway data and costs seconds per test run.
			"-c", "fsync=off",
			"-c", "synchronous_commit=off",
			"-c", "full_page_writes=off",
			// Parallel tests each open a pool; the default 100 runs out.
			"-c", "max_connections=300",
		}
		// SIGINT is Postgres's fast shutdown, what `pg_ctl stop -m fast` sends.
		proc, startErr := startProcess(postgres, args, dir, cred, syscall.SIGINT, log)
		if startErr != nil {
			return nil, startErr
		}
		url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		err = proc.waitReady(ctx, func(ctx context.Context) error { return pingPostgres(ctx, url) })
		if err == nil {
			return &Postgres{URL: url, Dir: dir, proc: proc, bin: postgres, args: args, cred: cred, log: log}, nil
		}
		proc.stop()
		if !errors.Is(err, errExited) {
			break
		}
	}
	return nil, err
}

// Restart stops the server (fast shutdown: open sessions are ended, their transactions
// rolled back) and starts it again on the same port with the same data: the "Postgres
// restarted under load" fault. It returns once the server accepts connections again.
func (p *Postgres) Restart(ctx context.Context) error {
	return p.RestartAfter(ctx, nil)
}

// RestartAfter is Restart with the server held down until whileDown returns: a test checks
// what an outage does for as long as it needs, by construction rather than by how quickly
// Postgres starts again.
func (p *Postgres) RestartAfter(ctx context.Context, whileDown func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.proc.stop(); err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	if whileDown != nil {
		whileDown()
	}
	proc, err := startProcess(p.bin, p.args, p.Dir, p.cred, syscall.SIGINT, p.log)
	if err != nil {
		return fmt.Errorf("restart postgres: %w", err)
	}
	if err := proc.waitReady(ctx, func(ctx context.Context) error { return pingPostgres(ctx, p.URL) }); err != nil {
		proc.stop()
		return fmt.Errorf("restart postgres: %w", err)
	}
	p.proc = proc
	return nil
}

// Stop shuts the server down (fast: open sessions are ended) and removes its directory if
// StartPostgres created it.
func (p *Postgres) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.proc.stop()
	if p.removeDir {
		err = errors.Join(err, os.RemoveAll(p.Dir))
	}
	return err
}

// PostgresReachable reports whether a server at url accepts a connection within a couple
// of seconds.
func PostgresReachable(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return pingPostgres(ctx, url) == nil
}

func pingPostgres(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.ConnectTimeout = time.Second
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

// postgresNextTo finds the server binary of the same installation as initdb, which may be
// reached through a symlink such as /usr/local/bin/initdb.
func postgresNextTo(initdb string) (string, error) {
	if real, err := filepath.EvalSymlinks(initdb); err == nil {
		p := filepath.Join(filepath.Dir(real), "postgres")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return findBinary("postgres", postgresLibDirs)
}

// postgresCredential returns who runs the Postgres binaries: the caller, unless it is root.
func postgresCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, Postgres must run as the OS user postgres: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// reachableBy checks that every parent of dir can be searched by cred, so the failure is
// named here rather than as initdb's "permission denied" (t.TempDir and /root are 0700).
func reachableBy(dir string, cred *syscall.Credential) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		mode := fi.Mode().Perm()
		ok := mode&0o001 != 0 ||
			(st.Uid == cred.Uid && mode&0o100 != 0) ||
			(st.Gid == cred.Gid && mode&0o010 != 0)
		if !ok {
			return fmt.Errorf("%s is not reachable by the postgres user: %s is mode %v; use a directory under %s", dir, d, mode, os.TempDir())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}
