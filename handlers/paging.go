// Pagination as GitLab does it, for every list of the operator API: page/per_page in,
// X-Page/X-Per-Page/X-Total/X-Next-Page out.

package handlers

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/jobapi/jobapi/builds"
)

// writeProjectPage answers one page of a project's list: read with list, shown with view.
func writeProjectPage[T, V any](w http.ResponseWriter, r *http.Request,
	list func(context.Context, int64, builds.Page) ([]T, int, error), view func(T) V) error {
	pid, err := projectID(r)
	if err != nil {
		return err
	}
	pg, err := pageOf(r)
	if err != nil {
		return err
	}
	items, total, err := list(r.Context(), pid, pg)
	if err != nil {
		return err
	}
	out := make([]V, len(items))
	for i, item := range items {
		out[i] = view(item)
	}
	writePage(w, pg, total, out)
	return nil
}

// Pagination as GitLab does it: page/per_page in, X-Page/X-Per-Page/X-Total/X-Next-Page out.
const (
	defaultPerPage = 20
	maxPerPage     = 100
)

func pageOf(r *http.Request) (builds.Page, error) {
	p := builds.Page{Page: 1, PerPage: defaultPerPage}
	q := r.URL.Query()
	if v := q.Get("page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1_000_000 {
			return p, badRequest("page must be a positive integer")
		}
		p.Page = n
	}
	if v := q.Get("per_page"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return p, badRequest("per_page must be a positive integer")
		}
		p.PerPage = min(n, maxPerPage)
	}
	return p, nil
}

func writePage(w http.ResponseWriter, p builds.Page, total int, body any) {
	w.Header().Set("X-Page", strconv.Itoa(p.Page))
	w.Header().Set("X-Per-Page", strconv.Itoa(p.PerPage))
	w.Header().Set("X-Total", strconv.Itoa(total))
	w.Header().Set("X-Total-Pages", strconv.Itoa((total+p.PerPage-1)/p.PerPage))
	next := ""
	if p.Page*p.PerPage < total {
		next = strconv.Itoa(p.Page + 1)
	}
	w.Header().Set("X-Next-Page", next)
	writeJSON(w, http.StatusOK, body)
}

// pageLinks sets GitLab's Link header on a page of total items: rel="next" and "prev" where
// they exist, "first" and "last", each the request's URL with its page changed, as GitLab's
// clients (python-gitlab's get_all) follow them.
func (h *Handler) pageLinks(w http.ResponseWriter, r *http.Request, p builds.Page, total int) {
	last := max(1, (total+p.PerPage-1)/p.PerPage)
	link := func(page int, rel string) string {
		q := r.URL.Query()
		q.Set("page", strconv.Itoa(page))
		q.Set("per_page", strconv.Itoa(p.PerPage))
		return "<" + h.externalBase(r) + r.URL.Path + "?" + q.Encode() + `>; rel="` + rel + `"`
	}
	var links []string
	if p.Page > 1 {
		links = append(links, link(min(p.Page-1, last), "prev"))
	}
	if p.Page < last {
		links = append(links, link(p.Page+1, "next"))
	}
	links = append(links, link(1, "first"), link(last, "last"))
	w.Header().Set("Link", strings.Join(links, ", "))
}
