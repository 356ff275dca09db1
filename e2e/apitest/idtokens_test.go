package apitest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/go-jose/go-jose/v4"

	"github.com/jobapi/jobapi/e2e/jobapitest"
	"github.com/jobapi/jobapi/idtoken"
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
