package idtoken

import (
	"context"
	"crypto/rsa"
	"sync"
)

// Keyring loads a replica's keys on first use and keeps them: a replica that never hands
// out a job or serves a JWKS never reads (or generates) a key, and one whose first load
// failed (Postgres away) tries again on the next call instead of failing its start.
type Keyring struct {
	load   func(context.Context) ([]*rsa.PrivateKey, error)
	mu     sync.Mutex
	signer *Signer
}

// NewKeyring returns a Keyring whose keys come from load, the signing key first.
func NewKeyring(load func(context.Context) ([]*rsa.PrivateKey, error)) *Keyring {
	return &Keyring{load: load}
}

// Signer returns the replica's Signer, loading the keys the first time. Concurrent first
// calls load once.
func (k *Keyring) Signer(ctx context.Context) (*Signer, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.signer != nil {
		return k.signer, nil
	}
	keys, err := k.load(ctx)
	if err != nil {
		return nil, err
	}
	s, err := New(keys)
	if err != nil {
		return nil, err
	}
	k.signer = s
	return s, nil
}
