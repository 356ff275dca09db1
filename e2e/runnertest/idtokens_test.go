package runnertest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/idtoken"
	"github.com/jobapi/jobapi/runnerclient"
	"github.com/jobapi/jobapi/server"
)

const idTokenIssuer = "https://ci.example.test"

// jwks fetches GET /oauth/discovery/keys over HTTP, as a relying party does.
func jwks(t *testing.T, base string) (jose.JSONWebKeySet, []byte) {
	t.Helper()
	resp, body := jobapitest.Send(t, base, "GET", "/oauth/discovery/keys", nil)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /oauth/discovery/keys: %d %s %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		t.Fatalf("JWKS %s: %v", body, err)
	}
	return set, body
}

// TestIDTokenDiscoveryAcrossReplicas: replicas of a fresh installation asked for their keys
// at the same moment (the first use, when the key is generated) serve one JWKS with one
// key, and every replica's discovery document names the one issuer, the external URL.
func TestIDTokenDiscoveryAcrossReplicas(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.ExternalURL = idTokenIssuer }})
	replicas := []*jobapitest.Instance{inst, inst.Replica(t, jobapitest.Options{}), inst.Replica(t, jobapitest.Options{}),
		inst.Replica(t, jobapitest.Options{})}
	bodies := make([][]byte, len(replicas))
	var start, wg sync.WaitGroup
	start.Add(1)
	for i, r := range replicas {
		wg.Go(func() {
			start.Wait()
			resp, err := jobapitest.HTTPClient.Get(r.URL + "/oauth/discovery/keys")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			bodies[i], _ = io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("replica %d: %d %s", i, resp.StatusCode, bodies[i])
			}
		})
	}
	start.Done()
	wg.Wait()
	for i := range replicas {
		if !bytes.Equal(bodies[i], bodies[0]) {
			t.Errorf("replica %d serves %s, replica 0 %s", i, bodies[i], bodies[0])
		}
	}
	set, _ := jwks(t, replicas[2].URL)
	if len(set.Keys) != 1 || set.Keys[0].Algorithm != "RS256" || set.Keys[0].Use != "sig" || !set.Keys[0].IsPublic() {
		t.Fatalf("JWKS %+v: want one public RS256 signing key", set.Keys)
	}
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM id_token_signing_keys`); n != 1 {
		t.Errorf("%d signing keys stored, want 1", n)
	}
	for i, r := range replicas {
		var d map[string]any
		r.MustDo(t, http.StatusOK, "GET", "/.well-known/openid-configuration", nil, &d)
		if d["issuer"] != idTokenIssuer || d["jwks_uri"] != idTokenIssuer+"/oauth/discovery/keys" {
			t.Errorf("replica %d: issuer %v, jwks_uri %v; want %s and its /oauth/discovery/keys", i, d["issuer"], d["jwks_uri"], idTokenIssuer)
		}
		if algs, _ := d["id_token_signing_alg_values_supported"].([]any); len(algs) != 1 || algs[0] != "RS256" {
			t.Errorf("replica %d: id_token_signing_alg_values_supported %v, want [RS256]", i, d["id_token_signing_alg_values_supported"])
		}
	}
}

// TestIDTokenSigningKeyFile: JOBAPI_ID_TOKEN_SIGNING_KEY's keys are the JWKS, the first
// one's kid first, nothing is stored; a file that is not an RSA key stops the replica.
func TestIDTokenSigningKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var text []byte
	for range 2 {
		k, err := idtoken.GenerateKey()
		if err != nil {
			t.Fatal(err)
		}
		text = append(text, k...)
	}
	keyFile := filepath.Join(dir, "keys.pem")
	if err := os.WriteFile(keyFile, text, 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := idtoken.ParsePEM(text)
	if err != nil {
		t.Fatal(err)
	}
	want, err := idtoken.New(keys)
	if err != nil {
		t.Fatal(err)
	}
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.IDTokenSigningKey = keyFile }})
	set, body := jwks(t, inst.URL)
	if !bytes.Equal(body, want.JWKS()) || len(set.Keys) != 2 || set.Keys[0].KeyID != want.KeyID() {
		t.Errorf("JWKS %s, want the file's two keys %s", body, want.JWKS())
	}
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM id_token_signing_keys`); n != 0 {
		t.Errorf("%d keys stored in Postgres with a key file set", n)
	}

	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	for path, msg := range map[string]string{bad: "no PEM-encoded RSA private key", filepath.Join(dir, "missing.pem"): "no such file"} {
		cfg := inst.Config
		cfg.IDTokenSigningKey = path
		srv, err := server.Start(context.Background(), cfg, slog.New(slog.DiscardHandler), server.Options{DisableSweeper: true})
		if err == nil {
			_ = srv.Close()
			t.Errorf("%s: the replica started", path)
		} else if !strings.Contains(err.Error(), "JOBAPI_ID_TOKEN_SIGNING_KEY") || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v; want an error naming the setting and %q", path, err, msg)
		}
	}
}

const idTokensYAML = `
default:
  id_tokens:
    VAULT_ID_TOKEN: {aud: $VAULT_AUD}
variables:
  VAULT_AUD: https://vault.example.com/$CI_PROJECT_ID
deploy:
  timeout: 30m
  environment: {name: production}
  id_tokens:
    CLOUD_TOKEN: {aud: [https://iam.example.com, $CI_SERVER_URL]}
  script: [echo "$CLOUD_TOKEN"]
`

// verifyIDToken checks a token as a relying party does: its kid found in the JWKS another
// replica serves over HTTP, its RS256 signature, and returns its claims.
func verifyIDToken(t *testing.T, set jose.JSONWebKeySet, raw string) map[string]any {
	t.Helper()
	tok, err := jwt.ParseSigned(raw, []jose.SignatureAlgorithm{jose.RS256})
	if err != nil {
		t.Fatalf("parse ID token: %v", err)
	}
	keys := set.Key(tok.Headers[0].KeyID)
	if len(keys) != 1 {
		t.Fatalf("kid %q: %d keys of the JWKS", tok.Headers[0].KeyID, len(keys))
	}
	var claims map[string]any
	if err := tok.Claims(keys[0].Key, &claims); err != nil {
		t.Fatalf("verify ID token with the JWKS: %v", err)
	}
	return claims
}

// TestIDTokensInJobPayload: a runner taking a job with id_tokens gets each as a masked,
// non-public variable holding a JWT that verifies against the JWKS of another replica,
// with GitLab's claims mapped to jobapi's; the aud list form stays a list; exp is the job's
// timeout; a retry gets new tokens; no token is stored or shown by the operator API.
func TestIDTokensInJobPayload(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.ExternalURL = idTokenIssuer }})
	other := inst.Replica(t, jobapitest.Options{})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "app", "path": "app"}, &proj)
	sha := strings.Repeat("a", 40)
	resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline?ref=main&sha="+sha, idTokensYAML, "Content-Type", "application/yaml")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	p := jobapitest.Decode[api.Pipeline](t, b)

	runnerID, token := inst.CreateRunner(t)
	runner := jobapitest.NewRunner(t, inst.URL, token, "s_idtokens")
	before := time.Now().Unix()
	job := runner.TakeNamed(t, "deploy")
	set, _ := jwks(t, other.URL)

	tokens := map[string]string{}
	for _, v := range job.Variables {
		if v.Key == "CLOUD_TOKEN" || v.Key == "VAULT_ID_TOKEN" {
			if !v.Masked || v.Public {
				t.Errorf("%s: masked %v public %v; want masked, not public", v.Key, v.Masked, v.Public)
			}
			tokens[v.Key] = v.Value
		}
	}
	if len(tokens) != 1 {
		t.Fatalf("ID token variables %v: want CLOUD_TOKEN only (the job's id_tokens replace default's)", tokens)
	}
	claims := verifyIDToken(t, set, tokens["CLOUD_TOKEN"])
	iat, _ := claims["iat"].(float64)
	if int64(iat) < before-1 || int64(iat) > time.Now().Unix()+1 {
		t.Errorf("iat %v, not now", claims["iat"])
	}
	jti, _ := claims["jti"].(string)
	want := map[string]any{
		"iss": idTokenIssuer, "sub": "project_path:jobapi/app:ref_type:branch:ref:main",
		"aud": []any{"https://iam.example.com", idTokenIssuer},
		"iat": iat, "nbf": iat - 5, "exp": iat + 30*60, "jti": jti,
		"namespace_path": "jobapi", "project_id": fmt.Sprint(proj.ID), "project_path": "jobapi/app",
		"pipeline_id": fmt.Sprint(p.ID), "pipeline_source": "api", "job_id": fmt.Sprint(job.ID),
		"ref": "main", "ref_type": "branch", "ref_path": "refs/heads/main", "ref_protected": "true",
		"environment": "production", "environment_protected": "false", "deployment_tier": "production",
		"environment_action": "start", "runner_id": float64(runnerID), "runner_environment": "self-hosted",
		"sha": sha, "project_visibility": "private",
		"job_project_id": fmt.Sprint(proj.ID), "job_project_path": "jobapi/app", "job_namespace_path": "jobapi",
	}
	if !reflect.DeepEqual(claims, want) {
		t.Errorf("claims\n got %v\nwant %v", claims, want)
	}
	if len(jti) != 36 {
		t.Errorf("jti %q: want a UUID", jti)
	}

	// Neither Postgres nor the operator's job view holds the token.
	if n := jobapitest.QueryInt(t, inst.Pool, `SELECT count(*) FROM builds WHERE payload::text LIKE '%' || $1 || '%'`, tokens["CLOUD_TOKEN"][:40]); n != 0 {
		t.Errorf("%d builds rows hold the token", n)
	}
	_, view := inst.Do(t, "GET", fmt.Sprintf("%s/jobs/%d", jobapitest.ProjectPath(proj.ID), job.ID), nil)
	if bytes.Contains(view, []byte(tokens["CLOUD_TOKEN"][:40])) {
		t.Error("the operator's job view shows the token")
	}

	// A retry is handed out with a new token: a new jti, the same claims otherwise.
	runner.Finish(t, job, runnerclient.StateFailed, "script_failure")
	var retried api.JobDetail
	inst.MustDo(t, http.StatusCreated, "POST", fmt.Sprintf("%s/jobs/%d/retry", jobapitest.ProjectPath(proj.ID), job.ID), nil, &retried)
	again := runner.TakeNamed(t, "deploy")
	tok2, _ := again.Variable("CLOUD_TOKEN")
	c2 := verifyIDToken(t, set, tok2)
	if tok2 == tokens["CLOUD_TOKEN"] || c2["jti"] == jti || c2["job_id"] != fmt.Sprint(again.ID) {
		t.Errorf("retry: token same %v, jti %v (first %s), job_id %v (job %d); want a new token for the new job",
			tok2 == tokens["CLOUD_TOKEN"], c2["jti"], jti, c2["job_id"], again.ID)
	}
}

// TestIDTokensDefaultAndExpandedAud: a job inheriting default:'s id_tokens gets it, its
// string aud a string claim with the job's variables expanded (a variable that itself
// names a predefined one).
func TestIDTokensDefaultAndExpandedAud(t *testing.T) {
	t.Parallel()
	inst := jobapitest.Start(t, jobapitest.Options{Configure: func(c *server.Config) { c.ExternalURL = idTokenIssuer }})
	var proj api.Project
	inst.MustDo(t, http.StatusCreated, "POST", "/api/v4/projects", map[string]any{"name": "lib", "path": "lib"}, &proj)
	src := idTokensYAML + "test:\n  script: [make]\n"
	resp, b := inst.Do(t, "POST", jobapitest.ProjectPath(proj.ID)+"/pipeline?ref=refs/tags/v1", src, "Content-Type", "application/yaml")
	jobapitest.WantStatus(t, resp, b, http.StatusCreated)
	runner := inst.NewRunner(t)
	var job *runnerclient.Job
	for range 2 {
		if j := runner.Take(t); j.JobInfo.Name == "test" {
			job = j
		}
	}
	if job == nil {
		t.Fatal("no test job handed out")
	}
	raw, ok := job.Variable("VAULT_ID_TOKEN")
	if !ok {
		t.Fatal("no VAULT_ID_TOKEN from default:")
	}
	set, _ := jwks(t, inst.URL)
	c := verifyIDToken(t, set, raw)
	if c["aud"] != fmt.Sprintf("https://vault.example.com/%d", proj.ID) || c["ref_type"] != "tag" || c["ref"] != "v1" ||
		c["ref_path"] != "refs/tags/v1" || c["sub"] != "project_path:jobapi/lib:ref_type:tag:ref:v1" || c["exp"] != c["iat"].(float64)+3600 {
		t.Errorf("claims %v: want aud expanded as a string, the tag's ref claims, exp an hour (the default timeout) on", c)
	}
	if _, has := c["environment"]; has {
		t.Errorf("a job without an environment has environment claims: %v", c)
	}
}
