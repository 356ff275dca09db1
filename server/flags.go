package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/jobapi/jobapi/featureflags/pgflags"
	"github.com/jobapi/jobapi/handlers"
	"github.com/jobapi/jobapi/webui"
)

// featuresAPI adapts the Postgres flag store to the Features API handlers.
type featuresAPI struct{ store *pgflags.Store }

var _ handlers.Flags = featuresAPI{}

func (f featuresAPI) List(r *http.Request) (any, error) {
	list, err := f.store.List(r.Context())
	if list == nil {
		list = []pgflags.Feature{}
	}
	return list, mapFlagErr(err)
}

func (f featuresAPI) Get(r *http.Request, name string) (any, error) {
	feat, err := f.store.Get(r.Context(), name)
	return feat, mapFlagErr(err)
}

func (f featuresAPI) Set(r *http.Request, name string, c handlers.FeatureChange) (any, error) {
	var (
		feat pgflags.Feature
		err  error
	)
	switch {
	case c.Percentage != nil:
		feat, err = f.store.SetPercentage(r.Context(), name, *c.Percentage)
	case c.Actor != "":
		feat, err = f.store.SetActor(r.Context(), name, c.Actor, *c.Boolean)
	default:
		feat, err = f.store.SetBoolean(r.Context(), name, *c.Boolean)
	}
	return feat, mapFlagErr(err)
}

func (f featuresAPI) Delete(r *http.Request, name string) error {
	return mapFlagErr(f.store.Delete(r.Context(), name))
}

func mapFlagErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, pgflags.ErrNotFound):
		return handlers.ErrFeatureNotFound
	case errors.Is(err, pgflags.ErrInvalidName), errors.Is(err, pgflags.ErrInvalidActor),
		errors.Is(err, pgflags.ErrInvalidPercentage):
		return &handlers.FeatureInvalidError{Msg: err.Error()}
	}
	return err
}

// webFlags adapts the Postgres flag store to the web UI's two-phase page.
type webFlags struct{ store *pgflags.Store }

var _ webui.Flags = webFlags{}

func (f webFlags) Feature(ctx context.Context, name string) (webui.Feature, error) {
	feat, err := f.store.Get(ctx, name)
	if errors.Is(err, pgflags.ErrNotFound) {
		return webui.Feature{Name: name, State: pgflags.StateOff}, nil
	}
	if err != nil {
		return webui.Feature{}, err
	}
	out := webui.Feature{Name: feat.Name, State: feat.State}
	for _, g := range feat.Gates {
		switch v := g.Value.(type) {
		case bool:
			out.On = v
		case []string:
			out.Actors = v
		case int:
			out.Percentage = v
		}
	}
	return out, nil
}

func (f webFlags) SetBoolean(ctx context.Context, name string, on bool) error {
	_, err := f.store.SetBoolean(ctx, name, on)
	return webFlagErr(err)
}

func (f webFlags) SetActor(ctx context.Context, name, actor string, on bool) error {
	_, err := f.store.SetActor(ctx, name, actor, on)
	return webFlagErr(err)
}

func (f webFlags) SetPercentage(ctx context.Context, name string, percent int) error {
	_, err := f.store.SetPercentage(ctx, name, percent)
	return webFlagErr(err)
}

func (f webFlags) Delete(ctx context.Context, name string) error {
	err := f.store.Delete(ctx, name)
	if errors.Is(err, pgflags.ErrNotFound) {
		return nil // already off
	}
	return webFlagErr(err)
}

func webFlagErr(err error) error {
	if errors.Is(err, pgflags.ErrInvalidName) || errors.Is(err, pgflags.ErrInvalidActor) ||
		errors.Is(err, pgflags.ErrInvalidPercentage) {
		return fmt.Errorf("%w: %w", webui.ErrFlagInvalid, err)
	}
	return err
}
