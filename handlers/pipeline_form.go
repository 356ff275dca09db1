package handlers

// GitLab's form encodings of POST /projects/:id/pipeline: `curl --data 'ref=main&
// variables[][key]=DEPLOY&variables[][value]=yes'` (application/x-www-form-urlencoded) and
// `curl -F ref=main -F 'variables[][key]=DEPLOY' …` (multipart/form-data), which GitLab's
// Rails reads as ref and an array of variables. The fields are read in the order sent:
// Rails starts the next hash of variables[] when a field it already has comes again, and so
// does queryVariables, which needs the order that url.Values and multipart.Form lose.

import (
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// formPair is one field of a form body, in the order sent.
type formPair struct{ key, value string }

// maxFormField bounds one multipart field's value (a ref or a variable's value).
const maxFormField = 1 << 20

// formPairs reads a urlencoded or multipart body's fields in their order. A file part is a
// 400: GitLab's parameters are values.
func formPairs(r *http.Request) ([]formPair, error) {
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, bodyError(err)
		}
		return urlencodedPairs(string(body), "form field")
	}
	if params["boundary"] == "" {
		return nil, badRequest("malformed form body: multipart/form-data without a boundary")
	}
	mr := multipart.NewReader(r.Body, params["boundary"])
	var out []formPair
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			var tooBig *http.MaxBytesError
			var netErr net.Error
			if errors.As(err, &tooBig) || errors.As(err, &netErr) {
				return nil, bodyError(err)
			}
			return nil, badRequest("malformed form body: %s", err.Error())
		}
		name := part.FormName()
		if name == "" {
			return nil, badRequest("malformed form body: a part without a field name")
		}
		if part.FileName() != "" {
			return nil, badRequest("form field %.60q is a file; send its value (-F %s=value, not @file)", name, name)
		}
		v, err := io.ReadAll(io.LimitReader(part, maxFormField+1))
		if err != nil {
			return nil, bodyError(err)
		}
		if len(v) > maxFormField {
			return nil, badRequest("form field %.60q is longer than %d bytes", name, maxFormField)
		}
		out = append(out, formPair{name, string(v)})
	}
}

// urlencodedPairs splits a query or urlencoded body into its fields in order; what names
// the fields in errors ("query parameter", "form field").
func urlencodedPairs(raw, what string) ([]formPair, error) {
	var out []formPair
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			return nil, badRequest("malformed %s %.60q: %s", what, k, err.Error())
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return nil, badRequest("malformed %s %.60q: %s", what, key, err.Error())
		}
		out = append(out, formPair{key, value})
	}
	return out, nil
}

// formPipelineRequest is POST …/pipeline's form body as GitLab takes it: ref (the query's
// when the body has none) and variables[][key|value|variable_type]. Fields GitLab does not
// take there are a 400 naming them, as unknown JSON fields are.
func formPipelineRequest(r *http.Request) (pipelineRequest, error) {
	pairs, err := formPairs(r)
	if err != nil {
		return pipelineRequest{}, err
	}
	req := pipelineRequest{Ref: r.URL.Query().Get("ref")}
	var varPairs []formPair
	for _, p := range pairs {
		switch {
		case p.key == "ref":
			req.Ref = p.value
		case strings.HasPrefix(p.key, "variables"):
			varPairs = append(varPairs, p)
		case p.key == "inputs" || strings.HasPrefix(p.key, "inputs["):
			return req, badRequest("inputs: jobapi has no spec:inputs; pass variables instead")
		default:
			return req, badRequest("form field %.60q: a pipeline from a form takes ref and variables[][key], variables[][value], variables[][variable_type] "+
				"(post JSON or application/yaml for the rest)", p.key)
		}
	}
	if varPairs != nil {
		if req.Variables, err = variablesOf(varPairs, "form field"); err != nil {
			return req, err
		}
	} else if req.Variables, err = queryVariables(r.URL.RawQuery); err != nil {
		return req, err
	}
	if req.Variables == nil {
		req.Variables = pipelineVariables{}
	}
	if req.Ref == "" {
		return req, badRequest("ref is missing: the branch or tag to run the pipeline for")
	}
	return req, nil
}
