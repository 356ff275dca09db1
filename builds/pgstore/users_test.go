package pgstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/users"
	"github.com/jobapi/jobapi/secrettoken"
	"github.com/jobapi/jobapi/testenv"
)

// Of many rotations of one token at once, exactly one makes a successor (the others find
// it revoked: ErrNotFound), so a token never has two live successors; the old digest is
// revoked, the successor's found by its own digest.
func TestRotateTokenOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(testenv.Pool(t))
	now := time.Now().UTC().Truncate(time.Microsecond)
	u, err := s.CreateUser(ctx, users.NewUser{Username: "rot", Name: "Rot", Email: "rot@example.com"}, now)
	if err != nil {
		t.Fatal(err)
	}
	old, err := s.CreateToken(ctx, users.Token{UserID: u.ID, Name: "t", Scopes: []string{"api"}, CreatedAt: now}, secrettoken.Hash("glpat-old"))
	if err != nil {
		t.Fatal(err)
	}
	const racers = 8
	var wg sync.WaitGroup
	results := make([]error, racers)
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = s.RotateToken(ctx, old.ID, users.Token{UserID: u.ID, Name: "t", Scopes: []string{"api"}, CreatedAt: now},
				secrettoken.Hash("glpat-next-"+string(rune('a'+i))))
		}()
	}
	wg.Wait()
	won := 0
	for _, err := range results {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, builds.ErrNotFound):
			t.Errorf("a losing rotation: %v, want ErrNotFound", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d rotations made a successor, want 1", won)
	}
	if tok, _, err := s.TokenByHash(ctx, secrettoken.Hash("glpat-old")); err != nil || !tok.Revoked {
		t.Errorf("the rotated token: %+v %v, want revoked", tok, err)
	}
	list, total, err := s.Tokens(ctx, u.ID, builds.Page{Page: 1, PerPage: 20})
	if err != nil || total != 2 || len(list) != 2 || list[1].Revoked {
		t.Errorf("tokens after the race: %+v (total %d, %v), want the old revoked and one live successor", list, total, err)
	}
}

// A duplicate username or email, whatever its case, is a users.TakenError naming the field.
func TestUserTaken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := New(testenv.Pool(t))
	now := time.Now()
	if _, err := s.CreateUser(ctx, users.NewUser{Username: "Ann", Name: "Ann", Email: "ann@example.com"}, now); err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateUser(ctx, users.NewUser{Username: "bea", Name: "Bea", Email: "bea@example.com"}, now)
	if err != nil {
		t.Fatal(err)
	}
	var taken *users.TakenError
	if _, err := s.CreateUser(ctx, users.NewUser{Username: "ANN", Name: "x", Email: "x@example.com"}, now); !errors.As(err, &taken) || taken.Field != "Username" {
		t.Errorf("username ANN: %v, want Username taken", err)
	}
	email := "ANN@example.com"
	if _, err := s.UpdateUser(ctx, b.ID, users.UserChange{Email: &email}, now); !errors.As(err, &taken) || taken.Field != "Email" {
		t.Errorf("bea's email to ANN@example.com: %v, want Email taken", err)
	}
	if _, err := s.UpdateUser(ctx, 999999, users.UserChange{Email: &email}, now); !errors.Is(err, builds.ErrNotFound) {
		t.Errorf("update of no user: %v, want ErrNotFound", err)
	}
}
