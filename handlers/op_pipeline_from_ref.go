package handlers

import (
	"bufio"
	"io"
	"net/http"
	"strings"

	"github.com/jobapi/jobapi/builds"
	"github.com/jobapi/jobapi/cipipeline"
)

// fromRepository says whether a JSON POST …/pipeline names only a ref (GitLab's API: ref and
// variables), so that .gitlab-ci.yml comes from the project's repository: neither a
// configuration (ci_config) nor a definition (stages, jobs) is given.
func (p pipelineRequest) fromRepository() bool {
	return p.CIConfig == nil && p.Stages == nil && p.Jobs == nil && p.Ref != ""
}

// withQueryRef is p with the query's ref when the body names neither a ref nor anything to
// compile ({"variables": […]} with ?ref=main).
func (p pipelineRequest) withQueryRef(r *http.Request) pipelineRequest {
	if p.CIConfig == nil && p.Stages == nil && p.Jobs == nil && p.Ref == "" {
		p.Ref = r.URL.Query().Get("ref")
	}
	return p
}

// createPipelineFromRef is POST …/pipeline with a ref only: the ref's head commit on the
// project's remote, .gitlab-ci.yml read and compiled there (cipipeline). The query's ref
// and variables (GitLab's variables[][key]=…&variables[][value]=…) serve when the body
// has none.
func (h *Handler) createPipelineFromRef(w http.ResponseWriter, r *http.Request, pid int64, req pipelineRequest) error {
	if req.Variables == nil {
		vars, err := queryVariables(r.URL.RawQuery)
		if err != nil {
			return err
		}
		req.Variables = vars
	}
	if err := h.mayRunOn(r.Context(), pid, req.Ref); err != nil {
		return err
	}
	c := cipipeline.Creator{Service: h.svc, Sources: h.includes, ServerURL: h.externalBase(r), Namespace: projectNamespace}
	p, err := c.FromRef(r.Context(), cipipeline.FromRef{ProjectID: pid, Ref: req.Ref, SHA: req.Sha,
		BeforeSHA: req.BeforeSha, Source: req.Source, Variables: req.Variables, TimeoutStrategy: req.TimeoutStrategy})
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

// refOnlyQuery is the request of POST …/pipeline?ref=… without a body (GitLab's documented
// curl call), or ok false when the request has a body or no ref in its query.
func refOnlyQuery(r *http.Request) (pipelineRequest, bool, error) {
	ref := r.URL.Query().Get("ref")
	if ref == "" {
		return pipelineRequest{}, false, nil
	}
	empty, err := bodyIsEmpty(r)
	if err != nil || !empty {
		return pipelineRequest{}, false, err
	}
	return pipelineRequest{Ref: ref}, true, nil
}

// bodyIsEmpty reads ahead one byte of r's body; what it read stays in the body for the
// decoder.
func bodyIsEmpty(r *http.Request) (bool, error) {
	if r.ContentLength > 0 {
		return false, nil
	}
	br := bufio.NewReaderSize(r.Body, 16)
	_, err := br.Peek(1)
	switch {
	case err == io.EOF:
		return true, nil
	case err != nil:
		return false, bodyError(err)
	}
	r.Body = struct {
		io.Reader
		io.Closer
	}{br, r.Body}
	return false, nil
}

// queryVariables reads GitLab's variables[][key], variables[][value] and
// variables[][variable_type] query parameters (variablesOf).
func queryVariables(rawQuery string) (pipelineVariables, error) {
	pairs, err := urlencodedPairs(rawQuery, "query parameter")
	if err != nil {
		return nil, err
	}
	return variablesOf(pairs, "query parameter")
}

// variablesOf reads GitLab's variables[][key], variables[][value] and
// variables[][variable_type] fields in their order (a field given again starts the next
// variable), as Rails reads an array of hashes; other fields are not its. what names the
// fields in errors.
func variablesOf(pairs []formPair, what string) (pipelineVariables, error) {
	var out pipelineVariables
	var have map[string]bool
	for _, p := range pairs {
		key, value := p.key, p.value
		field, ok := strings.CutPrefix(key, "variables[][")
		if !ok {
			if strings.HasPrefix(key, "variables") {
				return nil, badRequest("%s %.60q: pipeline variables are variables[][key], variables[][value] and variables[][variable_type]", what, key)
			}
			continue
		}
		field = strings.TrimSuffix(field, "]")
		if field != "key" && field != "value" && field != "variable_type" {
			return nil, badRequest("%s %.60q: a pipeline variable has key, value and variable_type", what, key)
		}
		if len(out) == 0 || have[field] {
			out = append(out, builds.Variable{})
			have = map[string]bool{}
		}
		have[field] = true
		cur := &out[len(out)-1]
		switch field {
		case "key":
			cur.Key = value
		case "value":
			cur.Value = value
		case "variable_type":
			switch value {
			case builds.VariableEnv:
			case builds.VariableFile:
				cur.File = true
			default:
				return nil, badRequest("pipeline variable %.60q: variable_type must be env_var or file", cur.Key)
			}
		}
	}
	for _, v := range out {
		if v.Key == "" {
			return nil, badRequest("a pipeline variable (%s variables[][…]) has no variables[][key]", what)
		}
	}
	return out, nil
}
