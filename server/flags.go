package server

import (
	"errors"
	"net/http"

	"github.com/jobapi/jobapi/featureflags/pgflags"
	"github.com/jobapi/jobapi/handlers"
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
