package pgflags_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobapi/jobapi/featureflags/pgflags"
)

func TestStoreValidation(t *testing.T) {
	t.Parallel()
	store := pgflags.NewStore(testPool(t, testDB(t)))
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"uppercase name", func() error { _, err := store.SetBoolean(ctx, "Flag", true); return err }, pgflags.ErrInvalidName},
		{"empty name", func() error { _, err := store.Get(ctx, ""); return err }, pgflags.ErrInvalidName},
		{"name too long", func() error { _, err := store.SetBoolean(ctx, strings.Repeat("a", 101), true); return err }, pgflags.ErrInvalidName},
		{"delete bad name", func() error { return store.Delete(ctx, "a-b") }, pgflags.ErrInvalidName},
		{"group actor", func() error { _, err := store.SetActor(ctx, "f", "group:1", true); return err }, pgflags.ErrInvalidActor},
		{"actor id 0", func() error { _, err := store.SetActor(ctx, "f", "project:0", true); return err }, pgflags.ErrInvalidActor},
		{"actor id beyond int64", func() error { _, err := store.SetActor(ctx, "f", "runner:9999999999999999999", true); return err }, pgflags.ErrInvalidActor},
		{"percentage 101", func() error { _, err := store.SetPercentage(ctx, "f", 101); return err }, pgflags.ErrInvalidPercentage},
		{"percentage -1", func() error { _, err := store.SetPercentage(ctx, "f", -1); return err }, pgflags.ErrInvalidPercentage},
		{"get unknown", func() error { _, err := store.Get(ctx, "nope"); return err }, pgflags.ErrNotFound},
		{"delete unknown", func() error { return store.Delete(ctx, "nope") }, pgflags.ErrNotFound},
	}
	for _, tt := range tests {
		if err := tt.call(); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	if got, err := store.List(ctx); err != nil || len(got) != 0 {
		t.Errorf("List after rejected changes = %v, %v; want nothing stored", got, err)
	}
}

func TestStoreGates(t *testing.T) {
	t.Parallel()
	store := pgflags.NewStore(testPool(t, testDB(t)))
	ctx := context.Background()
	const name = "two_phase"
	off := pgflags.Gate{Key: "boolean", Value: false}
	steps := []struct {
		name   string
		change func() (pgflags.Feature, error)
		want   pgflags.Feature
	}{
		{"actor on creates the flag",
			func() (pgflags.Feature, error) { return store.SetActor(ctx, name, "runner:5", true) },
			pgflags.Feature{Name: name, State: "conditional", Gates: []pgflags.Gate{off, {Key: "actors", Value: []string{"runner:5"}}}}},
		{"second actor, listed sorted",
			func() (pgflags.Feature, error) { return store.SetActor(ctx, name, "project:1", true) },
			pgflags.Feature{Name: name, State: "conditional", Gates: []pgflags.Gate{off, {Key: "actors", Value: []string{"project:1", "runner:5"}}}}},
		{"percentage",
			func() (pgflags.Feature, error) { return store.SetPercentage(ctx, name, 25) },
			pgflags.Feature{Name: name, State: "conditional", Gates: []pgflags.Gate{off,
				{Key: "actors", Value: []string{"project:1", "runner:5"}}, {Key: "percentage_of_actors", Value: 25}}}},
		{"actor off",
			func() (pgflags.Feature, error) { return store.SetActor(ctx, name, "runner:5", false) },
			pgflags.Feature{Name: name, State: "conditional", Gates: []pgflags.Gate{off,
				{Key: "actors", Value: []string{"project:1"}}, {Key: "percentage_of_actors", Value: 25}}}},
		{"enable keeps the other gates",
			func() (pgflags.Feature, error) { return store.SetBoolean(ctx, name, true) },
			pgflags.Feature{Name: name, State: "on", Gates: []pgflags.Gate{{Key: "boolean", Value: true},
				{Key: "actors", Value: []string{"project:1"}}, {Key: "percentage_of_actors", Value: 25}}}},
		{"disable clears every gate",
			func() (pgflags.Feature, error) { return store.SetBoolean(ctx, name, false) },
			pgflags.Feature{Name: name, State: "off", Gates: []pgflags.Gate{off}}},
		{"percentage 0 is no gate",
			func() (pgflags.Feature, error) { return store.SetPercentage(ctx, name, 0) },
			pgflags.Feature{Name: name, State: "off", Gates: []pgflags.Gate{off}}},
	}
	for _, s := range steps {
		got, err := s.change()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", s.name, got, s.want)
		}
		if stored, err := store.Get(ctx, name); err != nil || !reflect.DeepEqual(stored, got) {
			t.Fatalf("%s: Get = %+v, %v; want what the change returned", s.name, stored, err)
		}
	}

	if _, err := store.SetBoolean(ctx, "another", true); err != nil {
		t.Fatal(err)
	}
	list, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "another" || list[1].Name != name {
		t.Errorf("List = %+v, want another and %s, by name", list, name)
	}
	if err := store.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get(ctx, name); !errors.Is(err, pgflags.ErrNotFound) {
		t.Errorf("Get after Delete: err = %v, want ErrNotFound", err)
	}
}

func TestFeatureJSON(t *testing.T) {
	t.Parallel()
	store := pgflags.NewStore(testPool(t, testDB(t)))
	ctx := context.Background()
	if _, err := store.SetActor(ctx, "f", "project:1", true); err != nil {
		t.Fatal(err)
	}
	f, err := store.SetPercentage(ctx, "f", 25)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	// GitLab's shape: the boolean gate always, the others when set.
	want := `{"name":"f","state":"conditional","gates":[{"key":"boolean","value":false},{"key":"actors","value":["project:1"]},{"key":"percentage_of_actors","value":25}]}`
	if string(got) != want {
		t.Errorf("JSON:\n got %s\nwant %s", got, want)
	}
}

func TestStoreNotifies(t *testing.T) {
	t.Parallel()
	dbURL := testDB(t)
	store := pgflags.NewStore(testPool(t, dbURL))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "LISTEN "+pgflags.Channel); err != nil {
		t.Fatal(err)
	}

	if _, err := store.SetPercentage(ctx, "f", 101); err == nil {
		t.Fatal("SetPercentage 101 succeeded")
	}
	if _, err := store.SetBoolean(ctx, "f", true); err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(ctx, "f"); err != nil {
		t.Fatal(err)
	}
	// Exactly two notifications, in commit order; the rejected change sent none.
	for _, want := range []string{"f", "f"} {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n.Channel != pgflags.Channel || n.Payload != want {
			t.Errorf("notification %s %q, want %s %q", n.Channel, n.Payload, pgflags.Channel, want)
		}
	}
	short, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if n, err := conn.WaitForNotification(short); err == nil {
		t.Errorf("unexpected notification %+v", n)
	}
}
