package handlers

// Pipeline trigger tokens, GitLab's /projects/:id/triggers (PRIVATE-TOKEN), and the
// pipelines they start: POST /projects/:id/trigger/pipeline and
// /projects/:id/ref/:ref/trigger/pipeline, which take no PRIVATE-TOKEN but the trigger token
// (or a running job's CI_JOB_TOKEN) in `token`.

import (
	"encoding/json"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/jobapi/jobapi/api"
	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/builds/access"
	"github.com/jobapi/jobapi/builds/triggers"
)

func triggerView(base string, t triggers.Trigger, token string) api.Trigger {
	if token == "" {
		token = t.TokenLast4
	}
	return api.Trigger{ID: t.ID, Description: t.Description, Token: token, CreatedAt: t.CreatedAt,
		UpdatedAt: t.UpdatedAt, LastUsed: t.LastUsed, Owner: userView(base, t.Owner)}
}

// descriptionField reads GitLab's required `description` from a JSON or form body.
func descriptionField(r *http.Request) (string, error) {
	var body struct {
		Description *string `json:"description"`
	}
	if isForm(r) {
		if err := parseForm(r); err != nil {
			return "", err
		}
		if v, ok := r.Form["description"]; ok {
			body.Description = &v[len(v)-1]
		}
	} else if err := decodeJSON(r, &body, true); err != nil {
		return "", err
	}
	if body.Description == nil {
		return "", badRequest("description is missing")
	}
	return *body.Description, nil
}

// parseForm reads a urlencoded or multipart body into r.Form (with the query).
func parseForm(r *http.Request) error {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var err error
	if mt == "multipart/form-data" {
		err = r.ParseMultipartForm(limitSmall)
	} else {
		err = r.ParseForm()
	}
	if err != nil {
		if be := bodyError(err); be != err {
			return be
		}
		return badRequest("malformed form body: %s", err.Error())
	}
	return nil
}

func (h *Handler) createTrigger(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	desc, err := descriptionField(r)
	if err != nil {
		return err
	}
	c, err := h.triggers.Create(r.Context(), pid, desc)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, triggerView(h.externalBase(r), c.Trigger, c.Token))
	return nil
}

func (h *Handler) listTriggers(w http.ResponseWriter, r *http.Request) error {
	base := h.externalBase(r)
	return writeProjectPage(w, r, h.triggers.List, func(t triggers.Trigger) api.Trigger { return triggerView(base, t, "") })
}

func (h *Handler) getTrigger(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "trigger_id")
	if err != nil {
		return err
	}
	t, err := h.triggers.Get(r.Context(), pid, id)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, triggerView(h.externalBase(r), t, ""))
	return nil
}

func (h *Handler) updateTrigger(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "trigger_id")
	if err != nil {
		return err
	}
	desc, err := descriptionField(r)
	if err != nil {
		return err
	}
	t, err := h.triggers.Update(r.Context(), pid, id, desc)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, triggerView(h.externalBase(r), t, ""))
	return nil
}

func (h *Handler) deleteTrigger(w http.ResponseWriter, r *http.Request) error {
	pid, id, err := projectAndID(r, "trigger_id")
	if err != nil {
		return err
	}
	if err := h.triggers.Delete(r.Context(), pid, id); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// triggerRequest is the body of POST …/trigger/pipeline in any of GitLab's forms: JSON
// {"token", "ref", "variables": {"KEY": "value"}}, or a form (urlencoded or multipart) or
// the query with token, ref and variables[KEY]=value.
type triggerRequest struct {
	Token     string
	Ref       string
	Variables []builds.Variable
}

func readTriggerRequest(r *http.Request) (triggerRequest, error) {
	var req triggerRequest
	vars := map[string]string{}
	// The query first (GitLab's webhook form puts everything there), then the body.
	// GitLab's trigger takes variables as a hash (variables[KEY]=value); its pipeline API's
	// array form (variables[][key]=…) is a 400 here, as Grape refuses an array for a hash.
	takeValues := func(form url.Values) error {
		for key, vals := range form {
			v := vals[len(vals)-1]
			switch {
			case key == "token":
				req.Token = v
			case key == "ref":
				req.Ref = v
			case strings.HasPrefix(key, "variables[") && strings.HasSuffix(key, "]"):
				name := key[len("variables[") : len(key)-1]
				if name == "" || strings.ContainsAny(name, "[]") {
					return badRequest("%.60q: a trigger's variables are variables[KEY]=value", key)
				}
				vars[name] = v
			}
		}
		return nil
	}
	if err := takeValues(r.URL.Query()); err != nil {
		return req, err
	}
	switch {
	case isForm(r):
		if err := parseForm(r); err != nil {
			return req, err
		}
		if err := takeValues(r.PostForm); err != nil {
			return req, err
		}
		if r.MultipartForm != nil {
			if err := takeValues(r.MultipartForm.Value); err != nil {
				return req, err
			}
		}
	case r.ContentLength != 0: // a JSON body (an empty one, with any Content-Type, is none)
		var body struct {
			Token     *string         `json:"token"`
			Ref       *string         `json:"ref"`
			Variables json.RawMessage `json:"variables"`
			Inputs    json.RawMessage `json:"inputs"`
		}
		if err := decodeJSON(r, &body, true); err != nil {
			return req, err
		}
		if body.Token != nil {
			req.Token = *body.Token
		}
		if body.Ref != nil {
			req.Ref = *body.Ref
		}
		if len(body.Inputs) > 0 && string(body.Inputs) != "null" && string(body.Inputs) != "{}" {
			return req, badRequest("inputs: jobapi has no spec:inputs; pass variables instead")
		}
		if len(body.Variables) > 0 && string(body.Variables) != "null" {
			var m map[string]string
			if err := json.Unmarshal(body.Variables, &m); err != nil {
				var pv pipelineVariables
				if perr := json.Unmarshal(body.Variables, &pv); perr != nil {
					return req, badRequest("variables must be an object of names to string values")
				}
				req.Variables = append(req.Variables, pv...)
			}
			for k, v := range m {
				vars[k] = v
			}
		}
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		req.Variables = append(req.Variables, builds.Variable{Key: k, Value: vars[k]})
	}
	return req, nil
}

// triggerPipeline starts a pipeline with a trigger token or a running job's CI_JOB_TOKEN:
// 201 and the pipeline, 404 for a token that is unknown or another project's.
func (h *Handler) triggerPipeline(w http.ResponseWriter, r *http.Request) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	req, err := readTriggerRequest(r)
	if err != nil {
		return err
	}
	if ref := chi.URLParam(r, "ref"); ref != "" {
		// …/ref/:ref/trigger/pipeline: the ref is in the path (percent-decoded by the router).
		if req.Ref, err = url.PathUnescape(ref); err != nil {
			return badRequest("ref in the path is not percent-encoded properly")
		}
	}
	p, err := h.triggers.Run(r.Context(), triggers.Run{ProjectID: pid, Token: req.Token, Ref: req.Ref, Variables: req.Variables,
		ServerURL: h.externalBase(r)})
	if err != nil {
		return err
	}
	out := h.pipelineView(r, p)
	if out.GitStrategy, err = h.gitStrategy(r, pid); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// triggerRoutes are the trigger token routes of the operator API (PRIVATE-TOKEN).
func (h *Handler) triggerRoutes(r chi.Router) {
	r.With(h.can(access.ManageTriggers)).Get("/projects/{project_id}/triggers", h.wrap(h.listTriggers))
	r.With(h.can(access.ManageTriggers)).Post("/projects/{project_id}/triggers", h.wrap(h.createTrigger))
	r.With(h.can(access.ManageTriggers)).Get("/projects/{project_id}/triggers/{trigger_id}", h.wrap(h.getTrigger))
	r.With(h.can(access.ManageTriggers)).Put("/projects/{project_id}/triggers/{trigger_id}", h.wrap(h.updateTrigger))
	r.With(h.can(access.ManageTriggers)).Delete("/projects/{project_id}/triggers/{trigger_id}", h.wrap(h.deleteTrigger))
}

// triggerPipelineRoutes take the trigger token (or a job token) in the request instead of
// PRIVATE-TOKEN.
func (h *Handler) triggerPipelineRoutes(r chi.Router) {
	r = r.With(limitBody(limitSmall))
	r.Post("/projects/{project_id}/trigger/pipeline", h.wrap(h.triggerPipeline))
	r.Post("/projects/{project_id}/ref/{ref}/trigger/pipeline", h.wrap(h.triggerPipeline))
}
