package openstack

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

const testSecret = "s3cr3t-VALUE-do-not-print"

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestCredentialNeverPrintsSecrets(t *testing.T) {
	creds := []Credential{
		{AuthURL: "https://keystone.example/v3", Region: "RegionOne", AppCredentialID: "ac-id", AppCredentialSecret: testSecret},
		{AuthURL: "https://keystone.example/v3", Username: "ops", Password: testSecret, ProjectName: "vpn"},
	}
	for _, c := range creds {
		var outs []string
		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%60v"} {
			outs = append(outs, fmt.Sprintf(verb, c), fmt.Sprintf(verb, &c))
		}
		outs = append(outs, c.String(), c.GoString(), fmt.Sprint(c), fmt.Sprintln(c),
			fmt.Sprintf("%v", []Credential{c}), fmt.Sprintf("%+v", struct{ C Credential }{c}),
			fmt.Sprintf("%#v", map[string]Credential{"k": c}))
		js, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, string(js))
		var logBuf strings.Builder
		slog.New(slog.NewJSONHandler(&logBuf, nil)).Info("x", "cred", c)
		slog.New(slog.NewTextHandler(&logBuf, nil)).Info("x", "cred", c)
		outs = append(outs, logBuf.String())
		for _, o := range outs {
			if strings.Contains(o, testSecret) {
				t.Fatalf("secret leaked: %s", o)
			}
		}
		if !strings.Contains(fmt.Sprintf("%+v", c), redacted) {
			t.Errorf("%%+v does not show that a secret is present: %+v", c)
		}
		if !strings.Contains(fmt.Sprintf("%v", c), "keystone.example") {
			t.Errorf("%%v hides the non-secret fields: %v", c)
		}
	}
}

func TestFingerprint(t *testing.T) {
	base := Credential{AuthURL: "https://k/v3", Region: "r", AppCredentialID: "id", AppCredentialSecret: testSecret}
	if base.Fingerprint() != base.Fingerprint() {
		t.Fatal("fingerprint not stable")
	}
	if strings.Contains(base.Fingerprint(), testSecret) {
		t.Fatal("fingerprint contains the secret")
	}
	rotated := base
	rotated.AppCredentialSecret = testSecret + "2"
	if rotated.Fingerprint() == base.Fingerprint() {
		t.Error("rotating the secret must change the fingerprint")
	}
	shifted := base
	shifted.AppCredentialID, shifted.AppCredentialSecret = "id"+testSecret[:1], testSecret[1:]
	if shifted.Fingerprint() == base.Fingerprint() {
		t.Error("field boundaries must matter")
	}
}

func TestCredentialFromEnv(t *testing.T) {
	t.Run("application credential wins", func(t *testing.T) {
		c, err := CredentialFromEnv(envOf(map[string]string{
			EnvAuthURL: "https://k/v3", EnvRegionName: "RegionOne",
			EnvAppCredentialID: "ac", EnvAppCredentialSecret: testSecret + "\n",
			EnvUsername: "ops", EnvPassword: "pw", EnvProjectName: "p",
		}))
		if err != nil {
			t.Fatal(err)
		}
		if !c.UsesAppCredential() || c.AppCredentialSecret != testSecret || c.Username != "" || c.Password != "" {
			t.Errorf("got %+v", c)
		}
		ao := c.authOptions()
		if ao.ApplicationCredentialID != "ac" || ao.Username != "" || !ao.AllowReauth {
			t.Errorf("auth options %+v", ao.Scope)
		}
	})
	t.Run("password with project name and domains", func(t *testing.T) {
		c, err := CredentialFromEnv(envOf(map[string]string{
			EnvAuthURL: "https://k/v3", EnvUsername: "ops", EnvPassword: testSecret,
			EnvProjectName: "vpn", EnvUserDomainName: "users", EnvProjectDomainName: "projects",
		}))
		if err != nil {
			t.Fatal(err)
		}
		ao := c.authOptions()
		if ao.Username != "ops" || ao.DomainName != "users" || ao.Scope == nil ||
			ao.Scope.ProjectName != "vpn" || ao.Scope.DomainName != "projects" || !ao.AllowReauth {
			t.Errorf("auth options: user %q domain %q scope %+v", ao.Username, ao.DomainName, ao.Scope)
		}
	})
	t.Run("legacy tenant variables", func(t *testing.T) {
		c, err := CredentialFromEnv(envOf(map[string]string{
			EnvAuthURL: "https://k/v3", EnvUsername: "ops", EnvPassword: "pw", "OS_TENANT_ID": "p-1",
		}))
		if err != nil || c.ProjectID != "p-1" {
			t.Errorf("got %+v, %v", c, err)
		}
		if ao := c.authOptions(); ao.Scope.ProjectID != "p-1" || ao.DomainName != "Default" {
			t.Errorf("scope %+v, user domain %q", ao.Scope, ao.DomainName)
		}
	})
	for name, env := range map[string]map[string]string{
		"no auth url":       {EnvAppCredentialID: "ac", EnvAppCredentialSecret: testSecret},
		"secret only":       {EnvAuthURL: "u", EnvAppCredentialSecret: testSecret},
		"id only":           {EnvAuthURL: "u", EnvAppCredentialID: "ac"},
		"password, no user": {EnvAuthURL: "u", EnvPassword: testSecret, EnvProjectID: "p"},
		"no project":        {EnvAuthURL: "u", EnvUsername: "x", EnvPassword: testSecret},
		"empty":             {},
	} {
		t.Run("invalid/"+name, func(t *testing.T) {
			_, err := CredentialFromEnv(envOf(env))
			if !errors.Is(err, ErrInvalidCredential) {
				t.Fatalf("want ErrInvalidCredential, got %v", err)
			}
			if strings.Contains(err.Error(), testSecret) {
				t.Fatalf("error leaks the secret: %v", err)
			}
		})
	}
}

func TestSameEndpoint(t *testing.T) {
	a := Credential{AuthURL: "https://k:5000/v3/", Region: "r1"}
	if !a.SameEndpoint(Credential{AuthURL: "https://k:5000/v3", Region: "r1"}) {
		t.Error("trailing slash must be ignored")
	}
	if a.SameEndpoint(Credential{AuthURL: "https://evil:5000/v3", Region: "r1"}) {
		t.Error("different host accepted")
	}
	if a.SameEndpoint(Credential{AuthURL: "https://k:5000/v3", Region: "r2"}) {
		t.Error("different region accepted")
	}
}

func TestCredentialFromCloudsYAML(t *testing.T) {
	t.Setenv("OS_REGION_NAME", "")
	t.Setenv("OS_INTERFACE", "")
	t.Setenv("OS_CLOUD", "")
	doc := []byte(`
clouds:
  operator:
    auth:
      auth_url: https://keystone.example:5000/v3
      application_credential_id: ac-123
      application_credential_secret: ` + testSecret + `
    region_name: RegionOne
    interface: internal
  legacy:
    auth:
      auth_url: https://keystone.example:5000/v3
      username: ops
      password: ` + testSecret + `
      project_name: vpn
      user_domain_name: users
      project_domain_name: projects
    region_name: RegionTwo
`)
	c, err := CredentialFromCloudsYAML(doc, "operator")
	if err != nil {
		t.Fatal(err)
	}
	want := Credential{AuthURL: "https://keystone.example:5000/v3", Region: "RegionOne", Interface: "internal",
		AppCredentialID: "ac-123", AppCredentialSecret: testSecret}
	if c != want {
		t.Errorf("operator cloud = %+v", c)
	}
	l, err := CredentialFromCloudsYAML(doc, "legacy")
	if err != nil {
		t.Fatal(err)
	}
	if l.Username != "ops" || l.Password != testSecret || l.ProjectName != "vpn" || l.UserDomainName != "users" ||
		l.ProjectDomainName != "projects" || l.Region != "RegionTwo" || l.UsesAppCredential() {
		t.Errorf("legacy cloud = %+v", l)
	}

	t.Setenv("OS_REGION_NAME", "Override")
	if c, _ := CredentialFromCloudsYAML(doc, "operator"); c.Region != "Override" {
		t.Errorf("OS_REGION_NAME must override like the CLI does, got %q", c.Region)
	}

	for name, bad := range map[string][]byte{
		"missing cloud": doc,
		"broken yaml":   []byte("clouds: [\n  password: " + testSecret),
		"no auth":       []byte("clouds:\n  operator:\n    region_name: r\n"),
	} {
		cloud := "nope"
		if name != "missing cloud" {
			cloud = "operator"
		}
		_, err := CredentialFromCloudsYAML(bad, cloud)
		if !errors.Is(err, ErrInvalidCredential) {
			t.Errorf("%s: want ErrInvalidCredential, got %v", name, err)
		}
		if err != nil && strings.Contains(err.Error(), testSecret) {
			t.Errorf("%s: error leaks the secret", name)
		}
	}
}
