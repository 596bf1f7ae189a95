package openstack_test

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/tlsfront"
)

// A cloud behind a private CA, on every target (the real OpenStack too): the cloud's
// Keystone, Neutron and Nova served over TLS by a front with its own CA. The credential
// loaded as the operator loads it (OS_* variables with OS_CACERT; a clouds.yaml with
// cacert; OS_CACERT over the file's cacert) authenticates, finds every catalog endpoint
// on https, reads Neutron's extensions, writes to Neutron and reads from Nova through the
// front. Without the CA the same credential is refused by certificate verification (the
// control: the CA is what makes it work), and verify: false is refused outright.
func TestConformancePrivateCA(t *testing.T) {
	forTargets(t, func(t *testing.T, w *world) {
		ctx := ctxT(t)
		dir := t.TempDir()
		front, err := tlsfront.Start(w.authURL, dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(front.Close)
		cred := w.operatorCred
		cred.AuthURL = front.AuthURL
		env := map[string]string{
			"OS_AUTH_URL": cred.AuthURL, "OS_REGION_NAME": cred.Region,
			"OS_APPLICATION_CREDENTIAL_ID": cred.AppCredentialID, "OS_APPLICATION_CREDENTIAL_SECRET": cred.AppCredentialSecret,
			"OS_CACERT": front.CAFile,
		}
		getenv := func(k string) string { return env[k] }
		noFile := func(string) ([]byte, error) { return nil, os.ErrNotExist }
		loaded, tlsConfig, err := openstack.LoadCloud(getenv, noFile)
		if err != nil || tlsConfig == nil || tlsConfig.RootCAs == nil {
			t.Fatalf("LoadCloud with OS_CACERT: %v, TLS %+v", err, tlsConfig)
		}
		opts := openstack.ClientOptions{Timeout: 60 * time.Second, TLSConfig: tlsConfig}
		c := must(openstack.NewClients(ctx, loaded, opts)).get(t)
		tok := must(c.Identity.TokenInfo(ctx)).get(t)
		if !strings.HasPrefix(tok.NetworkEndpoint, "https://") || !strings.HasPrefix(tok.ComputeEndpoint, "https://") {
			t.Fatalf("the catalog's endpoints are not behind the front: network %s, compute %s", tok.NetworkEndpoint, tok.ComputeEndpoint)
		}
		features := must(openstack.DiscoverFeatures(ctx, c.Networking)).get(t)
		if err := features.Check(); err != nil {
			t.Fatal(err)
		}
		owner := openstack.Owner{Kind: "Test", Name: "private-ca", UID: "uid-private-ca"}
		sg := must(c.Networking.CreateSecurityGroup(ctx, openstack.CreateSecurityGroupOpts{Name: "private-ca", Tags: owner.Tags()})).get(t)
		if err := c.Networking.DeleteSecurityGroup(ctx, sg.ID); err != nil {
			t.Fatal(err)
		}
		must(c.Compute.ListServerInterfaces(ctx, w.serverA)).get(t)
		if n := len(front.Requests()); n < 2 && w.real() {
			t.Errorf("the front served %d origins; the real cloud's Keystone, Neutron and Nova are three: %v", n, front.Requests())
		}

		// The same through a clouds.yaml entry with cacert.
		clouds := filepath.Join(dir, "clouds.yaml")
		yaml := "clouds:\n  private:\n    auth:\n      auth_url: " + cred.AuthURL + "\n      application_credential_id: " + cred.AppCredentialID +
			"\n      application_credential_secret: " + cred.AppCredentialSecret + "\n    auth_type: v3applicationcredential\n    region_name: " + cred.Region +
			"\n    cacert: " + front.CAFile + "\n"
		if err := os.WriteFile(clouds, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		yenv := map[string]string{"OS_CLOUD": "private", "OS_CLIENT_CONFIG_FILE": clouds}
		ycred, ytls, err := openstack.LoadCloud(func(k string) string { return yenv[k] }, os.ReadFile)
		if err != nil || ytls == nil {
			t.Fatalf("clouds.yaml with cacert: %v", err)
		}
		must(openstack.NewClients(ctx, ycred, openstack.ClientOptions{Timeout: 60 * time.Second, TLSConfig: ytls})).get(t)

		// OS_CACERT wins over the file's cacert: another CA there fails verification.
		other, err := tlsfront.Start(w.authURL, t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		other.Close()
		yenv["OS_CACERT"] = other.CAFile
		ycred, ytls, err = openstack.LoadCloud(func(k string) string { return yenv[k] }, os.ReadFile)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := openstack.NewClients(ctx, ycred, openstack.ClientOptions{Timeout: 60 * time.Second, TLSConfig: ytls}); !unknownAuthority(err) {
			t.Errorf("OS_CACERT naming another CA: want a certificate verification failure, got %v", err)
		}

		// Control: without the CA, verification refuses the front.
		delete(env, "OS_CACERT")
		loaded, tlsConfig, err = openstack.LoadCloud(getenv, noFile)
		if err != nil || tlsConfig != nil {
			t.Fatalf("without OS_CACERT: %v, TLS %+v", err, tlsConfig)
		}
		if _, err := openstack.NewClients(ctx, loaded, openstack.ClientOptions{Timeout: 60 * time.Second}); !unknownAuthority(err) {
			t.Errorf("without the CA: want a certificate verification failure, got %v", err)
		}

		// verify: false is refused, not honoured.
		if err := os.WriteFile(clouds, []byte(strings.Replace(yaml, "    cacert: "+front.CAFile, "    verify: false", 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		delete(yenv, "OS_CACERT")
		if _, _, err := openstack.LoadCloud(func(k string) string { return yenv[k] }, os.ReadFile); !errors.Is(err, openstack.ErrInsecureTLS) {
			t.Errorf("verify: false: want ErrInsecureTLS, got %v", err)
		}
	})
}

func unknownAuthority(err error) bool {
	var ua x509.UnknownAuthorityError
	return errors.As(err, &ua) || (err != nil && strings.Contains(err.Error(), "certificate signed by unknown authority"))
}

// OS_CACERT that cannot be used is a clear error naming the file and the variable, for
// both credential sources.
func TestCACertErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.pem")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"OS_AUTH_URL": "https://keystone.example/v3", "OS_APPLICATION_CREDENTIAL_ID": "id", "OS_APPLICATION_CREDENTIAL_SECRET": testSecretValue}
	for _, tc := range []struct{ path, want string }{
		{filepath.Join(dir, "missing.pem"), "missing.pem"},
		{bad, "holds no PEM certificate"},
	} {
		env["OS_CACERT"] = tc.path
		_, _, err := openstack.LoadCloud(func(k string) string { return env[k] }, os.ReadFile)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "OS_CACERT") {
			t.Errorf("%s: %v", tc.path, err)
		}
		if err != nil && strings.Contains(err.Error(), testSecretValue) {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
	clouds := filepath.Join(dir, "clouds.yaml")
	if err := os.WriteFile(clouds, []byte("clouds:\n  c:\n    auth:\n      auth_url: https://keystone.example/v3\n      application_credential_id: id\n      application_credential_secret: "+testSecretValue+"\n    cacert: "+filepath.Join(dir, "gone.pem")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yenv := map[string]string{"OS_CLOUD": "c", "OS_CLIENT_CONFIG_FILE": clouds}
	_, _, err := openstack.LoadCloud(func(k string) string { return yenv[k] }, os.ReadFile)
	if err == nil || !strings.Contains(err.Error(), "gone.pem") || strings.Contains(err.Error(), testSecretValue) {
		t.Errorf("clouds.yaml with a missing cacert: %v", err)
	}
	// Without a CA anywhere: the system's CAs (nil TLS settings), for both sources.
	delete(env, "OS_CACERT")
	if _, tlsConfig, err := openstack.LoadCloud(func(k string) string { return env[k] }, os.ReadFile); err != nil || tlsConfig != nil {
		t.Errorf("no CA: %v %+v", err, tlsConfig)
	}
}

const testSecretValue = "tls-test-secret-never-shown"
