package openstacksim

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"
)

type token struct {
	id        string
	projectID string
	userID    string
	roles     []string
	appCredID string
	methods   []string
	issued    time.Time
	expires   time.Time
}

func hasRole(roles []string, want string) bool {
	for _, r := range roles {
		if strings.EqualFold(r, want) {
			return true
		}
	}
	return false
}

func (t *token) caller() *caller {
	c := &caller{projectID: t.projectID, userID: t.userID, roles: t.roles, tokenID: t.id}
	c.admin = hasRole(t.roles, "admin")
	// A token whose only roles are "reader" may look but not touch.
	c.readOnly = len(t.roles) > 0
	for _, r := range t.roles {
		if !strings.EqualFold(r, "reader") {
			c.readOnly = false
		}
	}
	return c
}

func (s *Server) lookupToken(id string) *token {
	if id == "" {
		return nil
	}
	s.tokMu.RLock()
	t := s.tokens[id]
	s.tokMu.RUnlock()
	if t == nil || time.Now().After(t.expires) {
		return nil
	}
	return t
}

// ExpireTokens invalidates every issued token, so the next call of each
// client gets a 401 and must re-authenticate.
func (s *Server) ExpireTokens() {
	s.tokMu.Lock()
	s.tokens = map[string]*token{}
	s.tokMu.Unlock()
}

// IssueToken authenticates an application credential (by name) directly,
// for tests that speak raw HTTP.
func (s *Server) IssueToken(appCredName string) (string, error) {
	s.st.mu.RLock()
	var ac *appCredRec
	for _, a := range s.st.appCreds {
		if a.Name == appCredName {
			ac = a
		}
	}
	s.st.mu.RUnlock()
	if ac == nil {
		return "", errf(404, "NotFound", "application credential %q not seeded", appCredName)
	}
	return s.newToken(ac.ProjectID, ac.UserID, s.tokenRoles(ac.Roles), ac.ID, []string{"application_credential"}).id, nil
}

// tokenRoles are the roles a token carries for roles granted: with ImpliedRoles also
// the roles those imply (admin implies member, member implies reader), as Keystone 27
// (2025.1) adds them to an application credential's token; Zed's Keystone put exactly
// the credential's roles into it.
func (s *Server) tokenRoles(granted []string) []string {
	if !s.st.impliedRoles {
		return granted
	}
	out := cloneStrings(granted)
	for _, imp := range [][2]string{{"admin", "member"}, {"member", "reader"}} {
		if hasRole(out, imp[0]) && !hasRole(out, imp[1]) {
			out = append(out, imp[1])
		}
	}
	return out
}

func (s *Server) newToken(projectID, userID string, roles []string, appCredID string, methods []string) *token {
	t := &token{id: "gAAAA" + randomSecret(), projectID: projectID, userID: userID, roles: cloneStrings(roles),
		appCredID: appCredID, methods: methods, issued: time.Now().UTC()}
	t.expires = t.issued.Add(s.tokenTTL)
	s.tokMu.Lock()
	s.tokens[t.id] = t
	s.tokMu.Unlock()
	return t
}

type authRequest struct {
	Auth struct {
		Identity struct {
			Methods  []string `json:"methods"`
			Password *struct {
				User authUser `json:"user"`
			} `json:"password"`
			AppCred *struct {
				ID     string    `json:"id"`
				Name   string    `json:"name"`
				Secret string    `json:"secret"`
				User   *authUser `json:"user"`
			} `json:"application_credential"`
			Token *struct {
				ID string `json:"id"`
			} `json:"token"`
		} `json:"identity"`
		Scope *struct {
			Project *struct {
				ID     string `json:"id"`
				Name   string `json:"name"`
				Domain *struct {
					ID   string `json:"id"`
					Name string `json:"name"`
				} `json:"domain"`
			} `json:"project"`
		} `json:"scope"`
	} `json:"auth"`
}

type authUser struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Password string `json:"password"`
}

func secretEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

var errUnauthorized = errf(401, "Unauthorized", "The request you have made requires authentication.")

func (s *Server) handleIssueToken(w http.ResponseWriter, r *http.Request) {
	var req authRequest
	if e := decode(r, &req); e != nil {
		writeError(w, svcIdentity, e)
		return
	}
	id := req.Auth.Identity
	st := s.st
	st.mu.RLock()
	var (
		tok *token
		e   *apiError
	)
	switch {
	case contains(id.Methods, "application_credential") && id.AppCred != nil:
		tok, e = s.authAppCred(req)
	case contains(id.Methods, "password") && id.Password != nil:
		tok, e = s.authPassword(req)
	case contains(id.Methods, "token") && id.Token != nil:
		tok, e = s.authToken(req)
	default:
		e = errf(400, "ValidationError", "Expecting to find identity methods in auth.")
	}
	var body map[string]any
	if e == nil {
		body = s.tokenBody(tok)
	}
	st.mu.RUnlock()
	if e != nil {
		writeError(w, svcIdentity, e)
		return
	}
	w.Header().Set("X-Subject-Token", tok.id)
	writeJSON(w, http.StatusCreated, body)
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func (s *Server) authAppCred(req authRequest) (*token, *apiError) {
	in := req.Auth.Identity.AppCred
	if req.Auth.Scope != nil && req.Auth.Scope.Project != nil {
		return nil, errf(401, "Unauthorized", "Application credentials cannot request a scope.")
	}
	var ac *appCredRec
	if in.ID != "" {
		ac = s.st.appCreds[in.ID]
	} else if in.Name != "" && in.User != nil {
		for _, a := range s.st.appCreds {
			u := s.st.users[a.UserID]
			if a.Name == in.Name && u != nil && (in.User.ID == u.ID || in.User.Name == u.Name) {
				ac = a
			}
		}
	}
	if ac == nil && in.ID != "" {
		// Keystone looks the credential up before it checks the secret.
		return nil, errf(404, "Not Found", "Could not find Application Credential: %s.", in.ID)
	}
	if ac == nil || !secretEqual(ac.secret, in.Secret) {
		return nil, errUnauthorized
	}
	return s.newToken(ac.ProjectID, ac.UserID, s.tokenRoles(ac.Roles), ac.ID, []string{"application_credential"}), nil
}

func (s *Server) authPassword(req authRequest) (*token, *apiError) {
	in := req.Auth.Identity.Password.User
	var u *userRec
	for _, x := range s.st.users {
		if (in.ID != "" && x.ID == in.ID) || (in.ID == "" && x.Name == in.Name) {
			u = x
		}
	}
	if u == nil || !u.AllowPassword || u.password == "" || !secretEqual(u.password, in.Password) {
		return nil, errUnauthorized
	}
	projectID := u.ProjectID
	if sc := req.Auth.Scope; sc != nil && sc.Project != nil {
		p := s.findProject(sc.Project.ID, sc.Project.Name)
		if p == nil || p.ID != u.ProjectID {
			return nil, errUnauthorized
		}
		projectID = p.ID
	}
	return s.newToken(projectID, u.ID, s.tokenRoles(u.Roles), "", []string{"password"}), nil
}

func (s *Server) authToken(req authRequest) (*token, *apiError) {
	old := s.lookupToken(req.Auth.Identity.Token.ID)
	if old == nil {
		return nil, errUnauthorized
	}
	if sc := req.Auth.Scope; sc != nil && sc.Project != nil {
		p := s.findProject(sc.Project.ID, sc.Project.Name)
		if p == nil || p.ID != old.projectID {
			return nil, errUnauthorized
		}
	}
	return s.newToken(old.projectID, old.userID, old.roles, old.appCredID, []string{"token"}), nil
}

func (s *Server) findProject(id, name string) *Project {
	if id != "" {
		return s.st.projects[id]
	}
	for _, p := range s.st.projects {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// tokenBody renders a Keystone v3 token; the caller holds st.mu.
func (s *Server) tokenBody(t *token) map[string]any {
	p := s.st.projects[t.projectID]
	u := s.st.users[t.userID]
	roles := make([]map[string]string, 0, len(t.roles))
	for _, r := range t.roles {
		roles = append(roles, map[string]string{"id": seedID("role", strings.ToLower(r)), "name": r})
	}
	domain := map[string]string{"id": "default", "name": "Default"}
	endpoint := func(svc, url string) map[string]any {
		var eps []map[string]any
		for _, iface := range []string{"public", "internal"} {
			eps = append(eps, map[string]any{"id": seedID("endpoint", svc+"/"+iface), "interface": iface,
				"region": s.st.region, "region_id": s.st.region, "url": url})
		}
		return map[string]any{"id": seedID("service", svc), "type": svc, "name": map[string]string{
			"network": "neutron", "compute": "nova", "identity": "keystone"}[svc], "endpoints": eps}
	}
	tok := map[string]any{
		"methods":    t.methods,
		"issued_at":  t.issued.Format("2006-01-02T15:04:05.000000Z"),
		"expires_at": t.expires.Format("2006-01-02T15:04:05.000000Z"),
		"audit_ids":  []string{t.id[len(t.id)-22:]},
		"is_domain":  false,
		"roles":      roles,
		"catalog": []map[string]any{
			endpoint("identity", s.AuthURL()),
			endpoint("network", s.url+networkPrefix),
			endpoint("compute", s.url+computePrefix+"/v2.1"),
		},
	}
	if p != nil {
		tok["project"] = map[string]any{"id": p.ID, "name": p.Name, "domain": domain}
	}
	if u != nil {
		tok["user"] = map[string]any{"id": u.ID, "name": u.Name, "domain": domain, "password_expires_at": nil}
	}
	if t.appCredID != "" {
		if ac := s.st.appCreds[t.appCredID]; ac != nil {
			tok["application_credential"] = map[string]any{"id": ac.ID, "name": ac.Name, "restricted": true}
		}
	}
	return map[string]any{"token": tok}
}

func (s *Server) handleValidateToken(w http.ResponseWriter, r *http.Request) {
	if s.lookupToken(r.Header.Get("X-Auth-Token")) == nil {
		writeError(w, svcIdentity, errUnauthorized)
		return
	}
	subj := s.lookupToken(r.Header.Get("X-Subject-Token"))
	if subj == nil {
		writeError(w, svcIdentity, errf(404, "NotFound", "Could not find token: %s.", "subject"))
		return
	}
	if r.Method == http.MethodHead {
		w.WriteHeader(http.StatusOK)
		return
	}
	s.st.mu.RLock()
	body := s.tokenBody(subj)
	s.st.mu.RUnlock()
	w.Header().Set("X-Subject-Token", subj.id)
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) handleRevokeToken(w http.ResponseWriter, r *http.Request) {
	if s.lookupToken(r.Header.Get("X-Auth-Token")) == nil {
		writeError(w, svcIdentity, errUnauthorized)
		return
	}
	subj := r.Header.Get("X-Subject-Token")
	if s.lookupToken(subj) == nil {
		writeError(w, svcIdentity, errf(404, "NotFound", "Could not find token."))
		return
	}
	s.tokMu.Lock()
	delete(s.tokens, subj)
	s.tokMu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleGetProject(w http.ResponseWriter, r *http.Request, c *caller) {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	p := s.st.projects[r.PathValue("id")]
	if p == nil || !owns(c, p.ID) {
		writeError(w, svcIdentity, errf(404, "NotFound", "Could not find project: %s.", r.PathValue("id")))
		return
	}
	writeJSON(w, 200, map[string]any{"project": map[string]any{"id": p.ID, "name": p.Name,
		"domain_id": "default", "enabled": true, "is_domain": false, "parent_id": "default"}})
}

func (s *Server) handleIdentityVersions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusMultipleChoices, map[string]any{"versions": map[string]any{"values": []any{
		s.identityVersion()}}})
}

func (s *Server) handleIdentityV3(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"version": s.identityVersion()})
}

func (s *Server) identityVersion() map[string]any {
	return map[string]any{"id": "v3.14", "status": "stable", "updated": "2020-04-07T00:00:00Z",
		"links": []any{map[string]string{"rel": "self", "href": s.AuthURL() + "/"}}}
}
