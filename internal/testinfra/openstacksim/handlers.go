package openstacksim

import (
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// Shared shapes of the read handlers. Every resource lists and gets the same
// way; only what the caller may see, what the query selects and the wire
// form differ, so those are what the helpers take.

// inOrder returns m's values in creation order, the order the services list
// them in.
func inOrder[T any](st *state, m map[string]*T) []*T {
	ids := slices.Collect(maps.Keys(m))
	st.sortIDs(ids)
	return byIDs(m, ids)
}

// byIDs looks ids up in m, keeping their order and skipping ids m lacks.
func byIDs[T any](m map[string]*T, ids []string) []*T {
	out := make([]*T, 0, len(ids))
	for _, id := range ids {
		if v := m[id]; v != nil {
			out = append(out, v)
		}
	}
	return out
}

// writeList answers a list request with the candidates keep accepts (the
// caller may see them and the query selects them), rendered by out as the
// JSON collection key. No match is an empty array, never null.
//
// With limit (or marker) in the query, or a page size set (SetPageSize), it pages as
// Neutron does: ordered by ID, the page after the marker, and a "<key>_links" next link
// while more remain. Neutron's fields= keeps only the named attributes of each entry
// (Nova's lists have no such parameter and ignore it).
func writeList[T any, PT interface {
	*T
	ident() string
}, W any](st *state, w http.ResponseWriter, r *http.Request, key string, candidates []PT, keep func(PT) bool, out func(PT) W) {
	var kept []PT
	for _, v := range candidates {
		if keep(v) {
			kept = append(kept, v)
		}
	}
	q := r.URL.Query()
	neutron := strings.HasPrefix(r.URL.Path, neutronBase+"/")
	limit, _ := strconv.Atoi(q.Get("limit"))
	if max := st.pageSize; neutron && max > 0 && (limit <= 0 || limit > max) {
		limit = max // pagination_max_limit: no page is longer
	}
	marker := q.Get("marker")
	var next string
	if limit > 0 || marker != "" {
		slices.SortFunc(kept, func(a, b PT) int { return strings.Compare(a.ident(), b.ident()) })
		if marker != "" {
			kept = slices.DeleteFunc(kept, func(v PT) bool { return v.ident() <= marker })
		}
		if limit > 0 && len(kept) > limit {
			kept = kept[:limit]
			q.Set("marker", kept[limit-1].ident())
			next = "http://" + r.Host + r.URL.Path + "?" + q.Encode()
		}
	}
	list := make([]any, 0, len(kept))
	fields := q["fields"]
	if !neutron {
		fields = nil
	}
	for _, v := range kept {
		list = append(list, onlyFields(out(v), fields))
	}
	body := map[string]any{key: list}
	if next != "" {
		body[key+"_links"] = []map[string]string{{"rel": "next", "href": next}}
	}
	writeJSON(w, 200, body)
}

// onlyFields renders v with only the named JSON attributes, or whole without names.
func onlyFields(v any, fields []string) any {
	if len(fields) == 0 {
		return v
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(raw, &all); err != nil {
		return v
	}
	kept := map[string]json.RawMessage{}
	for _, f := range fields {
		if a, ok := all[f]; ok {
			kept[f] = a
		}
	}
	return kept
}

// neutronGet serves GET .../{id}: find answers the resource or its 404 (it
// checks visibility), out renders it as the JSON member key.
func neutronGet[T, W any](s *Server, key string, find func(*caller, string) (*T, *apiError), out func(*T) W) hfn {
	return func(w http.ResponseWriter, r *http.Request, c *caller) {
		s.st.mu.RLock()
		defer s.st.mu.RUnlock()
		v, e := find(c, r.PathValue("id"))
		if e != nil {
			s.neutronFail(w, e)
			return
		}
		writeJSON(w, 200, map[string]any{key: out(v)})
	}
}

// neutronDelete serves DELETE .../{id}: find answers the resource or its
// 404, refuse answers a policy or in-use refusal (nil to go ahead) and
// remove deletes it.
func neutronDelete[T any](s *Server, find func(*caller, string) (*T, *apiError), refuse func(*caller, *T) *apiError, remove func(*T)) hfn {
	return func(w http.ResponseWriter, r *http.Request, c *caller) {
		s.st.mu.Lock()
		defer s.st.mu.Unlock()
		v, e := find(c, r.PathValue("id"))
		if e == nil {
			e = refuse(c, v)
		}
		if e != nil {
			s.neutronFail(w, e)
			return
		}
		remove(v)
		w.WriteHeader(204)
	}
}

// mayDelete is the refusal of a resource anyone who sees it may delete.
func mayDelete[T any](*caller, *T) *apiError { return nil }

// ident is the ID writeList pages by.
func (n *Network) ident() string       { return n.ID }
func (s *Subnet) ident() string        { return s.ID }
func (p *Port) ident() string          { return p.ID }
func (g *SecurityGroup) ident() string { return g.ID }
func (f *FloatingIP) ident() string    { return f.ID }
func (r *Router) ident() string        { return r.ID }
func (p *RBACPolicy) ident() string    { return p.ID }
func (i *Instance) ident() string      { return i.ID }
