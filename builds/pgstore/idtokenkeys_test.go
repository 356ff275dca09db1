package pgstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobapi/jobapi/testenv"
)

// TestIDTokenSigningKeysRace: replicas starting at once on an empty table all pass the
// first read, all generate a key, and still agree on one stored key, the one they sign
// with. Each has a pool of its own, as replicas do.
func TestIDTokenSigningKeysRace(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	const replicas = 6
	var generated sync.WaitGroup
	generated.Add(replicas)
	got := make([][]string, replicas)
	errs := make([]error, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		pool, err := pgxpool.New(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		s := New(pool)
		wg.Go(func() {
			got[i], errs[i] = s.IDTokenSigningKeys(context.Background(), func() ([]byte, error) {
				// Every replica has found the table empty before any stores its key.
				generated.Done()
				generated.Wait()
				return fmt.Appendf(nil, "key of replica %d", i), nil
			})
		})
	}
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if len(got[i]) != 1 || got[i][0] != got[0][0] {
			t.Errorf("replica %d has keys %q, replica 0 %q: want one key, the same", i, got[i], got[0])
		}
	}
	var rows int
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM id_token_signing_keys`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Errorf("%d keys stored, want 1", rows)
	}
	// A later start reads the key without generating one.
	again, err := New(pool).IDTokenSigningKeys(context.Background(), func() ([]byte, error) {
		t.Error("a key was generated although one is stored")
		return nil, errors.New("unexpected")
	})
	if err != nil || len(again) != 1 || again[0] != got[0][0] {
		t.Errorf("restart: %q, %v; want %q", again, err, got[0])
	}
}

// TestIDTokenSigningKeysOrder: the newest key signs (a rotation inserts one); all are
// returned; a failed generation stores nothing.
func TestIDTokenSigningKeysOrder(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := New(pool)
	ctx := context.Background()
	boom := errors.New("no entropy")
	if _, err := s.IDTokenSigningKeys(ctx, func() ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("generate failing: %v, want its error", err)
	}
	if _, err := s.IDTokenSigningKeys(ctx, func() ([]byte, error) { return []byte("old"), nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO id_token_signing_keys (private_key, created_at) VALUES ('new', now() + interval '1 second')`); err != nil {
		t.Fatal(err)
	}
	keys, err := s.IDTokenSigningKeys(ctx, func() ([]byte, error) { return nil, boom })
	if err != nil || len(keys) != 2 || keys[0] != "new" || keys[1] != "old" {
		t.Errorf("keys %q, %v; want [new old]", keys, err)
	}
}
