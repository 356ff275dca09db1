// Package server assembles a jobapi replica from its configuration: Postgres and Redis
// clients, migrations, the flag provider, the builds service, the HTTP server and the
// background workers. cmd/jobapi calls it, and tests start several replicas with it.
package server

import (
	"fmt"
	"github.com/jobapi/jobapi/oidclogin"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jobapi/jobapi/builds/artifacts"
	"github.com/jobapi/jobapi/objectstore"
)

// Config is SPEC §10's configuration. Env names are contracts.
type Config struct {
	ListenAddr          string
	DatabaseURL         string
	RedisURL            string
	RedisClusterAddrs   []string
	RedisKeyPrefix      string
	AdminToken          string
	AckTTL              time.Duration
	MaxProvisioningWait time.Duration
	SweepInterval       time.Duration
	AutoRetryMax        int
	LongPoll            time.Duration
	TraceLimit          int64
	TraceChunkSize      int64
	StuckStageTimeout   time.Duration
	AutoMigrate         bool
	DatabaseMaxConns    int32
	// FallbackClaims bounds the claims of job requests that cannot read the queue version
	// (0: a quarter of DatabaseMaxConns); FallbackClaimWait is how long past its hold such
	// a request waits for one before it is shed with 503.
	FallbackClaims    int
	FallbackClaimWait time.Duration
	FlagRefresh       time.Duration
	LogLevel          string
	// Reapers and the stuck-stage check.
	MaintenanceInterval time.Duration
	NoUpdatesTimeout    time.Duration
	ExecutionGrace      time.Duration
	PendingTimeout      time.Duration
	CancelingTimeout    time.Duration
	// Rate limits, requests per minute (0: off).
	RateLimitJobsRequest int
	RateLimitJobUpdates  int
	// RateLimitJobTokenFailures: PUTs and trace PATCHes with a wrong job token, per client address.
	RateLimitJobTokenFailures int
	// RateLimitAdminTokenFailures: wrong admin tokens (PRIVATE-TOKEN, web sign-in) per
	// client address; the global backstop is tokenguard.DefaultAdminFailuresGlobal.
	RateLimitAdminTokenFailures int
	// RateLimitTokenFailuresPerUser: refused personal access tokens of one user (revoked,
	// expired, the user blocked) per minute, from anywhere.
	RateLimitTokenFailuresPerUser int
	// RateLimitWebhookSignatureFailures and …PerProject: inbound webhooks with a wrong or
	// missing signature per client address and per project, per minute.
	RateLimitWebhookSignatureFailures           int
	RateLimitWebhookSignatureFailuresPerProject int
	// MaxTokenLifetimeDays bounds personal access tokens' expires_at and is the lifetime of
	// one created without it (0: no limit, such a token never expires).
	MaxTokenLifetimeDays  int
	RateLimitRunnerVerify int
	// StaleManagerAfter removes runner managers not seen for this long (0: never).
	StaleManagerAfter time.Duration
	// RunnerRegistrationToken lets gitlab-runner register with POST /runners ("": off).
	RunnerRegistrationToken string
	// MaxManagersPerRunner caps the system_ids one runner token may register (0: no cap).
	MaxManagersPerRunner int
	// RunnerTokenExpiresIn is the lifetime of runner tokens issued from now on (0: never).
	RunnerTokenExpiresIn time.Duration
	// RunnerTokenRotationGrace keeps a token a runner reset itself valid this long (0: none).
	RunnerTokenRotationGrace time.Duration
	// ExternalURL is the base of CI_SERVER_URL and the job and pipeline URLs ("": the
	// request's own scheme and Host).
	ExternalURL string
	// OIDC is the web UI's single sign-in (an empty issuer: off).
	OIDC oidclogin.Config
	// IDTokenSigningKey is the PEM file of the RSA keys that sign id_tokens, the signing key
	// first ("": a key generated once and kept in Postgres).
	IDTokenSigningKey string
	// ObjectStore is where job artifacts live: file:///dir or s3://bucket?endpoint=….
	ObjectStore string
	// ObjectStoreCredentials sign S3 requests: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
	// AWS_SESSION_TOKEN, the variables every S3 client reads (empty: ~/.aws, the instance role).
	ObjectStoreCredentials objectstore.Credentials
	// MaxArtifactSize caps one uploaded artifact.
	MaxArtifactSize int64
	// ArtifactsExpireIn is an artifact's lifetime when its upload names none.
	ArtifactsExpireIn artifacts.ExpireIn
	// ArtifactUploadTimeout bounds one artifact upload.
	ArtifactUploadTimeout time.Duration
	// HooksAllowLocalNetwork lets webhooks and forge statuses reach loopback and private
	// addresses (GitLab's "allow requests to the local network").
	HooksAllowLocalNetwork bool
	// HooksTimeout bounds one webhook or forge status request.
	HooksTimeout time.Duration
	// HooksMaxAttempts is how often a delivery is tried before it is given up.
	HooksMaxAttempts int
	// HooksRetryBackoff is the wait after a delivery's first failure; it doubles after each.
	HooksRetryBackoff time.Duration
	// HooksDisableBackoff is how long a hook is disabled after its 4th failed delivery in a
	// row (GitLab's auto-disabling); it doubles after each further one, up to a day.
	HooksDisableBackoff time.Duration
}

// Setting describes one environment variable: the configuration table in docs/configuration.md is
// written from the same list.
type Setting struct {
	Env, Default, Meaning string
	apply                 func(*Config, string) error
}

func duration(dst func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("want a Go duration such as 30s or 2h, got %q", v)
		}
		*dst(c) = d
		return nil
	}
}

func perMinute(dst func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 10_000_000 {
			return fmt.Errorf("want requests per minute, 0 to 10000000, got %q", v)
		}
		*dst(c) = n
		return nil
	}
}

// Settings lists every JOBAPI_* variable with its default.
var Settings = []Setting{
	{"JOBAPI_LISTEN_ADDR", ":8080", "HTTP listen address", func(c *Config, v string) error { c.ListenAddr = v; return nil }},
	{"JOBAPI_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/jobapi?sslmode=disable", "Postgres URL (the state of record)",
		func(c *Config, v string) error { c.DatabaseURL = v; return nil }},
	{"JOBAPI_REDIS_URL", "redis://127.0.0.1:6379/0", "Redis URL (ack TTLs, queue version)",
		func(c *Config, v string) error { c.RedisURL = v; return nil }},
	{"JOBAPI_REDIS_CLUSTER_ADDRS", "", "comma-separated host:port of a Redis Cluster; replaces JOBAPI_REDIS_URL",
		func(c *Config, v string) error {
			c.RedisClusterAddrs = nil
			for _, a := range strings.Split(v, ",") {
				if a = strings.TrimSpace(a); a != "" {
					c.RedisClusterAddrs = append(c.RedisClusterAddrs, a)
				}
			}
			return nil
		}},
	{"JOBAPI_REDIS_KEY_PREFIX", "jobapi:", "prefix of every Redis key", func(c *Config, v string) error { c.RedisKeyPrefix = v; return nil }},
	{"JOBAPI_ADMIN_TOKEN", "", "operator token, sent as PRIVATE-TOKEN (required by serve, at least 16 characters; 10 wrong tries per client address a minute, 300 in all, then 429)",
		func(c *Config, v string) error { c.AdminToken = v; return nil }},
	{"JOBAPI_ACK_TTL", "120s", "time a runner has to acknowledge a two-phase job",
		duration(func(c *Config) *time.Duration { return &c.AckTTL })},
	{"JOBAPI_MAX_PROVISIONING_WAIT", "1h", "longest total wait for an ack, keep-alives included",
		duration(func(c *Config) *time.Duration { return &c.MaxProvisioningWait })},
	{"JOBAPI_SWEEP_INTERVAL", "5s", "how often the ack sweeper runs",
		duration(func(c *Config) *time.Duration { return &c.SweepInterval })},
	{"JOBAPI_AUTO_RETRY_MAX", "2", "automatic retries for runner_provisioning_timeout", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 100 {
			return fmt.Errorf("want an integer from 0 to 100, got %q", v)
		}
		c.AutoRetryMax = n
		return nil
	}},
	{"JOBAPI_LONG_POLL", "0s", "hold idle job requests up to this long (0: answer at once)",
		duration(func(c *Config) *time.Duration { return &c.LongPoll })},
	{"JOBAPI_TRACE_LIMIT", "100MB", "largest job log (GitLab's default); beyond it the job fails with trace_size_exceeded", func(c *Config, v string) error {
		n, err := ParseBytes(v)
		if err != nil {
			return err
		}
		c.TraceLimit = n
		return nil
	}},
	{"JOBAPI_TRACE_CHUNK_SIZE", "128KiB", "live job log bytes kept in Redis before they move to Postgres as one chunk (GitLab's live trace chunk)", func(c *Config, v string) error {
		n, err := ParseBytes(v)
		if err != nil {
			return err
		}
		if n < 1<<10 || n > 64<<20 {
			return fmt.Errorf("want a size from 1KiB to 64MiB, got %q", v)
		}
		c.TraceChunkSize = n
		return nil
	}},
	{"JOBAPI_STUCK_STAGE_TIMEOUT", "2h", "a stage without progress for this long is stuck",
		duration(func(c *Config) *time.Duration { return &c.StuckStageTimeout })},
	{"JOBAPI_AUTO_MIGRATE", "true", "serve applies migrations before listening", func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", v)
		}
		c.AutoMigrate = b
		return nil
	}},
	{"JOBAPI_DATABASE_MAX_CONNS", "20", "Postgres connections per replica", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 2 || n > 1000 {
			return fmt.Errorf("want an integer from 2 to 1000, got %q", v)
		}
		c.DatabaseMaxConns = int32(n)
		return nil
	}},
	{"JOBAPI_FALLBACK_CLAIMS", "0", "job requests that cannot read the queue version (Redis slow or down) claim in Postgres at most this many at once per replica, one claim per runner profile answering the requests queued before it (0: a quarter of JOBAPI_DATABASE_MAX_CONNS)",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1000 {
				return fmt.Errorf("want an integer from 0 to 1000, got %q", v)
			}
			c.FallbackClaims = n
			return nil
		}},
	{"JOBAPI_FALLBACK_CLAIM_WAIT", "5s", "how long such a job request waits past its long poll for a claim to answer it; then 503 with Retry-After (gitlab-runner retries it)",
		duration(func(c *Config) *time.Duration { return &c.FallbackClaimWait })},
	{"JOBAPI_FLAG_REFRESH", "2s", "how often feature flags are reloaded (changes also arrive by NOTIFY)",
		duration(func(c *Config) *time.Duration { return &c.FlagRefresh })},
	{"JOBAPI_MAINTENANCE_INTERVAL", "", "how often the reapers, the stuck-stage check and the delayed-job pass run (default: the sweep interval)",
		func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			return duration(func(c *Config) *time.Duration { return &c.MaintenanceInterval })(c, v)
		}},
	{"JOBAPI_NO_UPDATES_TIMEOUT", "1h", "a running job without any runner update this long fails with no_updates_running",
		duration(func(c *Config) *time.Duration { return &c.NoUpdatesTimeout })},
	{"JOBAPI_EXECUTION_TIMEOUT_GRACE", "15m", "a running job this long past its timeout fails with job_execution_timeout",
		duration(func(c *Config) *time.Duration { return &c.ExecutionGrace })},
	{"JOBAPI_PENDING_TIMEOUT", "24h", "a job pending this long fails with stuck_pending",
		duration(func(c *Config) *time.Duration { return &c.PendingTimeout })},
	{"JOBAPI_CANCELING_TIMEOUT", "30m", "a canceling job without runner updates this long becomes canceled",
		duration(func(c *Config) *time.Duration { return &c.CancelingTimeout })},
	{"JOBAPI_RATE_LIMIT_JOBS_REQUEST", "2000", "POST /jobs/request per runner token per minute (0: off); over it: 429 + Retry-After",
		perMinute(func(c *Config) *int { return &c.RateLimitJobsRequest })},
	{"JOBAPI_RATE_LIMIT_JOB_UPDATES", "200", "PUT /jobs/:id, and separately trace PATCHes, per job per minute (0: off)",
		perMinute(func(c *Config) *int { return &c.RateLimitJobUpdates })},
	{"JOBAPI_RATE_LIMIT_JOB_TOKEN_FAILURES", "100", "PUT /jobs/:id and trace PATCHes with a wrong job token, per client address per minute (0: off); they never spend a job's own budget",
		perMinute(func(c *Config) *int { return &c.RateLimitJobTokenFailures })},
	{"JOBAPI_RATE_LIMIT_ADMIN_TOKEN_FAILURES", "10", "wrong tokens, admin or personal access tokens (PRIVATE-TOKEN, Bearer, web sign-in), per client address per minute (0: off; 300 a minute from all addresses together stays); past it: 429 + Retry-After, the right token too",
		perMinute(func(c *Config) *int { return &c.RateLimitAdminTokenFailures })},
	{"JOBAPI_RATE_LIMIT_TOKEN_FAILURES_PER_USER", "10", "refused personal access tokens of one user (revoked, expired, user blocked) per minute from any address (0: off); past it those get 429 + Retry-After, the user's valid tokens never",
		perMinute(func(c *Config) *int { return &c.RateLimitTokenFailuresPerUser })},
	{"JOBAPI_RATE_LIMIT_WEBHOOK_SIGNATURE_FAILURES", "10", "inbound webhooks with a wrong or missing signature, per client address per minute (0: off); past it: 429 + Retry-After for that address, a right signature too, and nothing created",
		perMinute(func(c *Config) *int { return &c.RateLimitWebhookSignatureFailures })},
	{"JOBAPI_RATE_LIMIT_WEBHOOK_SIGNATURE_FAILURES_PER_PROJECT", "60", "inbound webhooks with a wrong or missing signature, per project per minute from any address (0: off); past it: 429 + Retry-After for every delivery to the project until the minute ends",
		perMinute(func(c *Config) *int { return &c.RateLimitWebhookSignatureFailuresPerProject })},
	{"JOBAPI_MAX_TOKEN_LIFETIME_DAYS", "365", "longest lifetime of a personal access token, in days (GitLab's 365): a token created without expires_at expires that many days from today, a later expires_at is a 400 (0: no limit, and a token without expires_at never expires)",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 36500 {
				return fmt.Errorf("want a number of days from 0 to 36500, got %q", v)
			}
			c.MaxTokenLifetimeDays = n
			return nil
		}},
	{"JOBAPI_RATE_LIMIT_RUNNER_VERIFY", "60", "POST /runners/verify per runner token per minute (0: off)",
		perMinute(func(c *Config) *int { return &c.RateLimitRunnerVerify })},
	{"JOBAPI_MAX_MANAGERS_PER_RUNNER", "1000", "system_ids one runner token may register; a new one past it gets 429 (0: no cap)",
		func(c *Config, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 || n > 1_000_000 {
				return fmt.Errorf("want an integer from 0 to 1000000, got %q", v)
			}
			c.MaxManagersPerRunner = n
			return nil
		}},
	{"JOBAPI_STALE_MANAGER_AFTER", "168h", "runner managers not seen for this long are removed, as GitLab does after 7 days (0: never)",
		duration(func(c *Config) *time.Duration { return &c.StaleManagerAfter })},
	{"JOBAPI_RUNNER_TOKEN_EXPIRES_IN", "", "lifetime of runner tokens issued from then on, at least 1m (unset: tokens never expire); gitlab-runner resets its token at 75 % of it",
		func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			if err := duration(func(c *Config) *time.Duration { return &c.RunnerTokenExpiresIn })(c, v); err != nil {
				return err
			}
			if c.RunnerTokenExpiresIn != 0 && c.RunnerTokenExpiresIn < time.Minute {
				return fmt.Errorf("want at least 1m (or 0: never), got %q", v)
			}
			return nil
		}},
	{"JOBAPI_RUNNER_TOKEN_ROTATION_GRACE", "10m", "after a runner resets its own token, the old one keeps working this long, never past its expiry (0: stops at once, as GitLab); an operator's reset revokes at once",
		duration(func(c *Config) *time.Duration { return &c.RunnerTokenRotationGrace })},
	{"JOBAPI_RUNNER_REGISTRATION_TOKEN", "", "registration token for gitlab-runner register with POST /runners (unset: such registration answers 403; at least 16 characters when set)",
		func(c *Config, v string) error { c.RunnerRegistrationToken = v; return nil }},
	{"JOBAPI_EXTERNAL_URL", "", "base URL runners and jobs reach jobapi at: CI_SERVER_URL, CI_API_V4_URL, job and pipeline URLs (default: from the request's Host)",
		func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
				return fmt.Errorf("want an http(s) URL such as https://ci.example.com, got %q", v)
			}
			c.ExternalURL = strings.TrimRight(v, "/")
			return nil
		}},
	{"JOBAPI_OIDC_ISSUER_URL", "", "OpenID Provider of the web UI's single sign-in (its discovery document at /.well-known/openid-configuration); unset: sign-in with tokens only",
		func(c *Config, v string) error { c.OIDC.IssuerURL = strings.TrimRight(v, "/"); return nil }},
	{"JOBAPI_OIDC_CLIENT_ID", "", "client id jobapi is registered with at the OpenID Provider",
		func(c *Config, v string) error { c.OIDC.ClientID = v; return nil }},
	{"JOBAPI_OIDC_CLIENT_SECRET", "", "client secret of that registration (confidential client; PKCE is used as well)",
		func(c *Config, v string) error { c.OIDC.ClientSecret = v; return nil }},
	{"JOBAPI_OIDC_REDIRECT_URL", "", "jobapi's callback as registered at the provider: https://<jobapi>/oidc/callback (default: JOBAPI_EXTERNAL_URL + /oidc/callback)",
		func(c *Config, v string) error { c.OIDC.RedirectURL = v; return nil }},
	{"JOBAPI_OIDC_USERNAME_CLAIM", "preferred_username", "ID token (or userinfo) claim a new user's username is made from on the first sign-in",
		func(c *Config, v string) error { c.OIDC.UsernameClaim = v; return nil }},
	{"JOBAPI_OIDC_GROUPS_CLAIM", "groups", "claim that lists the account's groups, read when JOBAPI_OIDC_REQUIRED_GROUP is set",
		func(c *Config, v string) error { c.OIDC.GroupsClaim = v; return nil }},
	{"JOBAPI_OIDC_REQUIRED_GROUP", "", "only accounts in this group (in the groups claim) may sign in; others get a page that says so and nothing is created (unset: every account of the provider)",
		func(c *Config, v string) error { c.OIDC.RequiredGroup = v; return nil }},
	{"JOBAPI_ID_TOKEN_SIGNING_KEY", "", "PEM file of the RSA private keys (2048 bits or more) that sign the jobs' id_tokens: the first signs, all are listed at /oauth/discovery/keys, so a retired key stays until its tokens expire; the same file on every replica (unset: a key generated by the first replica and kept in Postgres, in clear)",
		func(c *Config, v string) error { c.IDTokenSigningKey = v; return nil }},
	{"JOBAPI_OBJECT_STORE", "file:///var/lib/jobapi/objects", "where job artifacts are stored: file:///dir, or s3://bucket?endpoint=http://host:9000&region=… for S3-compatible storage (credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, else the instance role)",
		func(c *Config, v string) error {
			u, err := url.Parse(v)
			if err != nil || (u.Scheme != "file" && u.Scheme != "s3") {
				return fmt.Errorf("want file:///path or s3://bucket?endpoint=…&region=…, got %q", redactURL(v))
			}
			c.ObjectStore = v
			return nil
		}},
	{"JOBAPI_MAX_ARTIFACT_SIZE", "100MB", "largest artifact a job may upload (GitLab's default); a larger upload is refused with 413 while it streams",
		func(c *Config, v string) error {
			n, err := ParseBytes(v)
			if err != nil {
				return err
			}
			c.MaxArtifactSize = n
			return nil
		}},
	{"JOBAPI_DEFAULT_ARTIFACTS_EXPIRE_IN", "30 days", "how long artifacts are kept when the job's expire_in names no time (GitLab's syntax: 30 days, 1 week, never); the latest successful pipeline of each ref keeps its artifacts longer",
		func(c *Config, v string) error {
			e, err := artifacts.ParseExpireIn(v)
			if err != nil {
				return err
			}
			c.ArtifactsExpireIn = e
			return nil
		}},
	{"JOBAPI_ARTIFACT_UPLOAD_TIMEOUT", "1h", "longest an artifact upload may take; an upload that never finished is removed from the object store after it",
		duration(func(c *Config) *time.Duration { return &c.ArtifactUploadTimeout })},
	{"JOBAPI_HOOKS_ALLOW_LOCAL_NETWORK", "false", "let project webhooks and forge commit statuses reach loopback, private and link-local addresses (GitLab's \"allow requests to the local network\"); off, such URLs are refused and every connection is checked after DNS",
		func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("want true or false, got %q", v)
			}
			c.HooksAllowLocalNetwork = b
			return nil
		}},
	{"JOBAPI_HOOKS_TIMEOUT", "10s", "longest one webhook or forge commit status request may take (GitLab's webhook timeout)",
		duration(func(c *Config) *time.Duration { return &c.HooksTimeout })},
	{"JOBAPI_HOOKS_MAX_ATTEMPTS", "8", "tries of one webhook or commit status delivery before it is given up (1 to 100)", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			return fmt.Errorf("want an integer from 1 to 100, got %q", v)
		}
		c.HooksMaxAttempts = n
		return nil
	}},
	{"JOBAPI_HOOKS_RETRY_BACKOFF", "10s", "wait after a delivery's first failure (transport error or non-2xx answer); it doubles after each further one, up to an hour",
		duration(func(c *Config) *time.Duration { return &c.HooksRetryBackoff })},
	{"JOBAPI_HOOKS_DISABLE_BACKOFF", "1m", "how long a project hook is temporarily disabled after its 4th failed delivery in a row (no deliveries meanwhile); it doubles after each further failure, up to a day; after 40 in a row the hook is disabled until edited or tested successfully",
		duration(func(c *Config) *time.Duration { return &c.HooksDisableBackoff })},
	{"JOBAPI_LOG_LEVEL", "info", "debug, info, warn or error", func(c *Config, v string) error {
		switch v {
		case "debug", "info", "warn", "error":
			c.LogLevel = v
			return nil
		}
		return fmt.Errorf("want debug, info, warn or error, got %q", v)
	}},
}

// ObjectStoreCredentialEnv are the variables LoadConfig reads besides Settings: the S3 keys,
// under the names every S3 client reads (JOBAPI_OBJECT_STORE's row says so).
var ObjectStoreCredentialEnv = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}

// LoadConfig reads every setting from getenv, falling back to its default. A bad value is
// an error naming the variable.
func LoadConfig(getenv func(string) string) (Config, error) {
	var c Config
	for _, s := range Settings {
		v := getenv(s.Env)
		if v == "" {
			v = s.Default
		}
		if err := s.apply(&c, v); err != nil {
			return Config{}, fmt.Errorf("%s: %w", s.Env, err)
		}
	}
	if c.AckTTL < time.Second {
		return Config{}, fmt.Errorf("JOBAPI_ACK_TTL: must be at least 1s")
	}
	if c.SweepInterval < 10*time.Millisecond {
		return Config{}, fmt.Errorf("JOBAPI_SWEEP_INTERVAL: must be at least 10ms")
	}
	if c.ArtifactUploadTimeout < time.Second {
		return Config{}, fmt.Errorf("JOBAPI_ARTIFACT_UPLOAD_TIMEOUT: must be at least 1s")
	}
	if c.HooksTimeout < 100*time.Millisecond || c.HooksTimeout > 5*time.Minute {
		return Config{}, fmt.Errorf("JOBAPI_HOOKS_TIMEOUT: must be from 100ms to 5m")
	}
	if c.HooksRetryBackoff < 10*time.Millisecond {
		return Config{}, fmt.Errorf("JOBAPI_HOOKS_RETRY_BACKOFF: must be at least 10ms")
	}
	if c.HooksDisableBackoff < 10*time.Millisecond {
		return Config{}, fmt.Errorf("JOBAPI_HOOKS_DISABLE_BACKOFF: must be at least 10ms")
	}
	c.ObjectStoreCredentials = objectstore.Credentials{AccessKeyID: getenv(ObjectStoreCredentialEnv[0]),
		SecretAccessKey: getenv(ObjectStoreCredentialEnv[1]), SessionToken: getenv(ObjectStoreCredentialEnv[2])}
	if c.OIDC.Enabled() && c.OIDC.RedirectURL == "" && c.ExternalURL != "" {
		c.OIDC.RedirectURL = c.ExternalURL + "/oidc/callback"
	}
	if err := c.OIDC.Check(); err != nil {
		return Config{}, fmt.Errorf("JOBAPI_OIDC_*: %w", err)
	}
	if c.MaintenanceInterval == 0 || c.MaintenanceInterval > c.SweepInterval {
		// Short thresholds must act within seconds: never slower than the sweeper.
		c.MaintenanceInterval = c.SweepInterval
	}
	return c, nil
}

// ParseBytes reads sizes such as 4MiB, 512KiB, 1048576 or 4MB.
func ParseBytes(v string) (int64, error) {
	s := strings.TrimSpace(v)
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/mult {
		return 0, fmt.Errorf("want a size such as 4MiB, got %q", v)
	}
	return n * mult, nil
}

// redactURL hides a password in a URL that is shown in an error.
func redactURL(v string) string {
	if u, err := url.Parse(v); err == nil {
		return u.Redacted()
	}
	return "(unparsable URL)"
}
