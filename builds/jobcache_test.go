package builds

import (
	"testing"

	"github.com/jobapi/jobapi/secrettoken"
)

func TestJobCacheChecksTokenAndKeepsMaskedValuesOnly(t *testing.T) {
	c := newJobCache(10)
	b := Build{ID: 7, Payload: Payload{Variables: []Variable{
		{Key: "SECRET", Value: "hunter2-long-secret", Masked: true},
		{Key: "SHORT", Value: "short", Masked: true},
		{Key: "PLAIN", Value: "not-a-secret-value"},
	}}}
	c.put(b, secrettoken.Hash("glcbt-right"), nil)
	if _, ok := c.get(7, "glcbt-wrong"); ok {
		t.Fatal("a wrong token must miss")
	}
	if _, ok := c.get(7, ""); ok {
		t.Fatal("an empty token must miss")
	}
	e, ok := c.get(7, "glcbt-right")
	if !ok {
		t.Fatal("the right token must hit")
	}
	if len(e.vars) != 1 || e.vars[0].Key != "SECRET" {
		t.Fatalf("cached variables %+v, want the one maskable secret", e.vars)
	}
	c.forget(7)
	if _, ok := c.get(7, "glcbt-right"); ok {
		t.Fatal("a forgotten build must miss")
	}
}

func TestJobCacheKeepsTwoGenerations(t *testing.T) {
	c := newJobCache(2)
	for id := int64(1); id <= 5; id++ {
		c.put(Build{ID: id}, secrettoken.Hash("t"), nil)
	}
	// 1,2 → prev when 3 arrives; 3,4 → prev when 5 arrives (1,2 dropped); cur holds 5.
	for id, want := range map[int64]bool{1: false, 2: false, 3: true, 4: true, 5: true} {
		if _, ok := c.get(id, "t"); ok != want {
			t.Errorf("build %d cached=%t, want %t", id, ok, want)
		}
	}
}
