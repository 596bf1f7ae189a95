package openstack

import (
	"bytes"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack/config/clouds"
)

// Credential is everything needed to authenticate against one cloud.
// Application credentials are preferred; user/password is the fallback for
// the operator's own environment. Formatting a Credential with any fmt verb,
// as JSON or through slog never shows the secret or the password.
type Credential struct {
	AuthURL   string
	Region    string
	Interface string // endpoint interface: "public" (default), "internal", "admin"

	AppCredentialID     string
	AppCredentialSecret string

	Username          string
	UserID            string
	Password          string
	UserDomainName    string
	UserDomainID      string
	ProjectID         string
	ProjectName       string
	ProjectDomainName string
	ProjectDomainID   string
}

// Environment variable names, shared by the operator's own environment and
// the ClusterLink credential Secret's keys.
const (
	EnvAuthURL             = "OS_AUTH_URL"
	EnvRegionName          = "OS_REGION_NAME"
	EnvInterface           = "OS_INTERFACE"
	EnvAppCredentialID     = "OS_APPLICATION_CREDENTIAL_ID"
	EnvAppCredentialSecret = "OS_APPLICATION_CREDENTIAL_SECRET"
	EnvUsername            = "OS_USERNAME"
	EnvUserID              = "OS_USER_ID"
	EnvPassword            = "OS_PASSWORD"
	EnvUserDomainName      = "OS_USER_DOMAIN_NAME"
	EnvUserDomainID        = "OS_USER_DOMAIN_ID"
	EnvProjectID           = "OS_PROJECT_ID"
	EnvProjectName         = "OS_PROJECT_NAME"
	EnvProjectDomainName   = "OS_PROJECT_DOMAIN_NAME"
	EnvProjectDomainID     = "OS_PROJECT_DOMAIN_ID"
	envTenantID            = "OS_TENANT_ID"
	envTenantName          = "OS_TENANT_NAME"
	envDomainName          = "OS_DOMAIN_NAME"
	envDomainID            = "OS_DOMAIN_ID"
)

// ErrInvalidCredential marks a credential that is incomplete; it is a spec
// problem, not worth retrying.
var ErrInvalidCredential = errors.New("invalid OpenStack credential")

// CredentialFromEnv reads OS_* variables through lookup (os.Getenv, or a
// Secret's data). Values are trimmed: a Secret written with `echo` carries a
// trailing newline that would otherwise fail authentication obscurely. When
// an application credential is present the user/password fields are ignored.
func CredentialFromEnv(lookup func(string) string) (Credential, error) {
	get := func(keys ...string) string {
		for _, k := range keys {
			if v := strings.TrimSpace(lookup(k)); v != "" {
				return v
			}
		}
		return ""
	}
	c := Credential{
		AuthURL:             get(EnvAuthURL),
		Region:              get(EnvRegionName),
		Interface:           get(EnvInterface),
		AppCredentialID:     get(EnvAppCredentialID),
		AppCredentialSecret: get(EnvAppCredentialSecret),
	}
	if c.AppCredentialID == "" && c.AppCredentialSecret == "" {
		c.Username = get(EnvUsername)
		c.UserID = get(EnvUserID)
		c.Password = get(EnvPassword)
		c.UserDomainName = get(EnvUserDomainName, envDomainName)
		c.UserDomainID = get(EnvUserDomainID, envDomainID)
		c.ProjectID = get(EnvProjectID, envTenantID)
		c.ProjectName = get(EnvProjectName, envTenantName)
		c.ProjectDomainName = get(EnvProjectDomainName, envDomainName)
		c.ProjectDomainID = get(EnvProjectDomainID, envDomainID)
	}
	return c, c.Validate()
}

// CredentialFromCloudsYAML reads entry cloud of a clouds.yaml document.
// Like the OpenStack CLI, OS_REGION_NAME and OS_INTERFACE in the process
// environment override the file. No other file is read (no secure.yaml),
// so the result depends only on data and those two variables (and on the CA
// file the entry's cacert names, which must be readable: CloudFromCloudsYAML).
func CredentialFromCloudsYAML(data []byte, cloud string) (Credential, error) {
	c, _, err := parseCloudsYAML(data, cloud, "")
	return c, err
}

// parseCloudsYAML reads entry cloud with gophercloud's parser: the credential, and the
// TLS settings the parser computes (caCertPath, when not empty, over the entry's cacert).
func parseCloudsYAML(data []byte, cloud, caCertPath string) (c Credential, tlsConfig *tls.Config, err error) {
	// gophercloud's parser dereferences a missing auth section; a malformed
	// file must be a refusal, not a crash of the operator.
	defer func() {
		if r := recover(); r != nil {
			c, tlsConfig, err = Credential{}, nil, fmt.Errorf("%w: cloud %q in clouds.yaml is incomplete", ErrInvalidCredential, cloud)
		}
	}()
	opts := []clouds.ParseOption{clouds.WithCloudsYAML(bytes.NewReader(data)), clouds.WithCloudName(cloud)}
	if caCertPath != "" {
		opts = append(opts, clouds.WithCACertPath(caCertPath))
	}
	ao, eo, tlsConfig, err := clouds.Parse(opts...)
	if err != nil {
		var nf clouds.ErrFileNotFound
		switch {
		case errors.As(err, &nf) || strings.Contains(err.Error(), "not found in clouds.yaml"):
			return Credential{}, nil, fmt.Errorf("%w: cloud %q not found in clouds.yaml", ErrInvalidCredential, cloud)
		case strings.Contains(err.Error(), "TLS configuration"):
			// The TLS errors name files (cacert, cert, key), never their contents.
			return Credential{}, nil, fmt.Errorf("%w: cloud %q: %v", ErrInvalidCredential, cloud, err)
		}
		// The YAML decoder's messages quote offending values, which may be
		// secrets; say only which cloud failed.
		return Credential{}, nil, fmt.Errorf("%w: cannot parse clouds.yaml for cloud %q", ErrInvalidCredential, cloud)
	}
	c = Credential{
		AuthURL:             ao.IdentityEndpoint,
		Region:              eo.Region,
		AppCredentialID:     ao.ApplicationCredentialID,
		AppCredentialSecret: ao.ApplicationCredentialSecret,
	}
	switch eo.Availability {
	case gophercloud.AvailabilityInternal:
		c.Interface = "internal"
	case gophercloud.AvailabilityAdmin:
		c.Interface = "admin"
	}
	if c.AppCredentialID == "" && c.AppCredentialSecret == "" {
		c.Username, c.UserID, c.Password = ao.Username, ao.UserID, ao.Password
		c.UserDomainName, c.UserDomainID = ao.DomainName, ao.DomainID
		c.ProjectID, c.ProjectName = ao.TenantID, ao.TenantName
		if ao.Scope != nil {
			c.ProjectDomainName, c.ProjectDomainID = ao.Scope.DomainName, ao.Scope.DomainID
		}
	}
	return c, tlsConfig, c.Validate()
}

// UsesAppCredential reports whether c authenticates with an application
// credential (the only kind ClusterLink Secrets may carry).
func (c Credential) UsesAppCredential() bool { return c.AppCredentialID != "" }

// Validate checks that c is complete enough to try. Its messages name
// missing fields, never values.
func (c Credential) Validate() error {
	var missing []string
	if c.AuthURL == "" {
		missing = append(missing, EnvAuthURL)
	}
	switch {
	case c.AppCredentialID != "" || c.AppCredentialSecret != "":
		if c.AppCredentialID == "" {
			missing = append(missing, EnvAppCredentialID)
		}
		if c.AppCredentialSecret == "" {
			missing = append(missing, EnvAppCredentialSecret)
		}
	default:
		if c.Username == "" && c.UserID == "" {
			missing = append(missing, EnvAppCredentialID+" or "+EnvUsername)
		}
		if c.Password == "" {
			missing = append(missing, EnvPassword)
		}
		if c.ProjectID == "" && c.ProjectName == "" {
			missing = append(missing, EnvProjectID+" or "+EnvProjectName)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: missing %s", ErrInvalidCredential, strings.Join(missing, ", "))
	}
	return nil
}

// SameEndpoint reports whether c points at the same Keystone and region as
// other, ignoring a trailing slash. A Secret naming another endpoint must
// never make the operator send a credential there.
func (c Credential) SameEndpoint(other Credential) bool {
	return strings.TrimRight(c.AuthURL, "/") == strings.TrimRight(other.AuthURL, "/") &&
		c.Region == other.Region
}

// Fingerprint is a stable digest of every field, secret included, so a
// cache can tell that a credential changed without keeping or comparing
// the secret itself. It is one-way; showing it reveals nothing useful.
func (c Credential) Fingerprint() string {
	h := sha256.New()
	for _, f := range []string{
		"v1", c.AuthURL, c.Region, c.Interface, c.AppCredentialID, c.AppCredentialSecret,
		c.Username, c.UserID, c.Password, c.UserDomainName, c.UserDomainID,
		c.ProjectID, c.ProjectName, c.ProjectDomainName, c.ProjectDomainID,
	} {
		// Length-prefixed so ("ab","c") and ("a","bc") differ.
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

const redacted = "<redacted>"

func redact(v string) string {
	if v == "" {
		return ""
	}
	return redacted
}

func (c Credential) String() string {
	var b strings.Builder
	b.WriteString("Credential{")
	field := func(k, v string) {
		if v == "" {
			return
		}
		if b.Len() > len("Credential{") {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s=%s", k, v)
	}
	field("AuthURL", c.AuthURL)
	field("Region", c.Region)
	field("Interface", c.Interface)
	field("AppCredentialID", c.AppCredentialID)
	field("AppCredentialSecret", redact(c.AppCredentialSecret))
	field("Username", c.Username)
	field("UserID", c.UserID)
	field("Password", redact(c.Password))
	field("UserDomainName", c.UserDomainName)
	field("UserDomainID", c.UserDomainID)
	field("ProjectID", c.ProjectID)
	field("ProjectName", c.ProjectName)
	field("ProjectDomainName", c.ProjectDomainName)
	field("ProjectDomainID", c.ProjectDomainID)
	b.WriteString("}")
	return b.String()
}

func (c Credential) GoString() string { return "openstack." + c.String() }

// Format makes every verb (%v, %+v, %#v, %s, %q, %x...) print the redacted
// form; without it %#v and %x would dump the raw fields.
func (c Credential) Format(f fmt.State, verb rune) {
	switch {
	case verb == 'v' && f.Flag('#'):
		_, _ = f.Write([]byte(c.GoString()))
	case verb == 'q':
		_, _ = fmt.Fprintf(f, "%q", c.String())
	default:
		_, _ = f.Write([]byte(c.String()))
	}
}

// MarshalJSON keeps structured loggers that encode values as JSON from
// printing the secret.
func (c Credential) MarshalJSON() ([]byte, error) {
	return json.Marshal(map[string]string{
		"authURL":             c.AuthURL,
		"region":              c.Region,
		"appCredentialID":     c.AppCredentialID,
		"appCredentialSecret": redact(c.AppCredentialSecret),
		"username":            c.Username,
		"password":            redact(c.Password),
		"projectID":           c.ProjectID,
		"projectName":         c.ProjectName,
	})
}

// LogValue keeps slog from printing the secret.
func (c Credential) LogValue() slog.Value { return slog.StringValue(c.String()) }

// authOptions turns c into gophercloud options, application credential
// first. AllowReauth lets a long-running client renew an expired token.
func (c Credential) authOptions() gophercloud.AuthOptions {
	if c.UsesAppCredential() {
		return gophercloud.AuthOptions{
			IdentityEndpoint:            c.AuthURL,
			ApplicationCredentialID:     c.AppCredentialID,
			ApplicationCredentialSecret: c.AppCredentialSecret,
			AllowReauth:                 true,
		}
	}
	ao := gophercloud.AuthOptions{
		IdentityEndpoint: c.AuthURL,
		Username:         c.Username,
		UserID:           c.UserID,
		Password:         c.Password,
		AllowReauth:      true,
	}
	if c.UserID == "" {
		// Keystone wants a user domain only for a user given by name.
		ao.DomainName, ao.DomainID = c.UserDomainName, c.UserDomainID
		if ao.DomainName == "" && ao.DomainID == "" {
			ao.DomainName = "Default"
		}
	}
	scope := &gophercloud.AuthScope{ProjectID: c.ProjectID}
	if c.ProjectID == "" {
		scope.ProjectName = c.ProjectName
		scope.DomainName, scope.DomainID = c.ProjectDomainName, c.ProjectDomainID
		if scope.DomainName == "" && scope.DomainID == "" {
			scope.DomainName, scope.DomainID = c.UserDomainName, c.UserDomainID
		}
		if scope.DomainName == "" && scope.DomainID == "" {
			scope.DomainName = "Default"
		}
	}
	ao.Scope = scope
	return ao
}
