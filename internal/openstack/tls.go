package openstack

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
)

// EnvCACert names a PEM bundle of the CAs that sign the cloud's API endpoints, as the
// OpenStack CLI reads it. It applies to both credential sources (OS_* variables and a
// clouds.yaml, where it wins over the entry's cacert).
const EnvCACert = "OS_CACERT"

// ErrInsecureTLS refuses a clouds.yaml entry with `verify: false`: the operator's
// credential is never sent to an endpoint whose certificate it has not verified. A
// private CA goes into cacert (or OS_CACERT) instead.
var ErrInsecureTLS = errors.New("verify: false is refused: give the cloud's CA in cacert or OS_CACERT instead")

// TLSFromCACert returns TLS settings that trust the CA certificates of the PEM bundle at
// path for the cloud's endpoints, in place of the system's (as the OpenStack CLI does).
// An empty path returns nil: the system's CAs.
func TLSFromCACert(path string) (*tls.Config, error) {
	if path == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the CA bundle %s (%s): %w", path, EnvCACert, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bytes.TrimSpace(pem)) {
		return nil, fmt.Errorf("the CA bundle %s (%s) holds no PEM certificate", path, EnvCACert)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// CloudFromCloudsYAML reads entry cloud of a clouds.yaml as CredentialFromCloudsYAML
// does, with the TLS settings the entry asks for, computed by gophercloud's parser: the
// CA bundle of its cacert, or caCertPath when not empty (OS_CACERT wins over the file,
// as with the CLI), and its client certificate and key (cert, key). An entry with
// verify: false is refused (ErrInsecureTLS). The TLS settings are nil when the entry
// asks for nothing: the system's CAs.
func CloudFromCloudsYAML(data []byte, cloud, caCertPath string) (Credential, *tls.Config, error) {
	cred, tlsConfig, err := parseCloudsYAML(data, cloud, caCertPath)
	if err != nil {
		return Credential{}, nil, err
	}
	if tlsConfig == nil {
		return cred, nil, nil
	}
	if tlsConfig.InsecureSkipVerify {
		return Credential{}, nil, fmt.Errorf("%w: cloud %q: %w", ErrInvalidCredential, cloud, ErrInsecureTLS)
	}
	if tlsConfig.RootCAs == nil && len(tlsConfig.Certificates) == 0 {
		return cred, nil, nil
	}
	tlsConfig.MinVersion = tls.VersionTLS12
	return cred, tlsConfig, nil
}

// LoadCloud reads a credential the way the operator does: a clouds.yaml entry when
// OS_CLOUD is set (the file named by OS_CLIENT_CONFIG_FILE, else the first of
// cloudsYAML that exists), else the OS_* variables; with the TLS settings of
// OS_CACERT or the entry's cacert. getenv and readFile are os.Getenv and os.ReadFile
// outside tests.
func LoadCloud(getenv func(string) string, readFile func(string) ([]byte, error), cloudsYAML ...string) (Credential, *tls.Config, error) {
	ca := strings.TrimSpace(getenv(EnvCACert))
	if cloud := getenv("OS_CLOUD"); cloud != "" {
		paths := cloudsYAML
		if p := getenv("OS_CLIENT_CONFIG_FILE"); p != "" {
			paths = []string{p}
		}
		for _, p := range paths {
			data, err := readFile(p)
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			if err != nil {
				return Credential{}, nil, fmt.Errorf("reading clouds.yaml: %w", err)
			}
			return CloudFromCloudsYAML(data, cloud, ca)
		}
		return Credential{}, nil, fmt.Errorf("%w: cloud %q named but no clouds.yaml found (looked in %s)", ErrInvalidCredential, cloud, strings.Join(paths, ", "))
	}
	cred, err := CredentialFromEnv(getenv)
	if err != nil {
		return Credential{}, nil, err
	}
	tlsConfig, err := TLSFromCACert(ca)
	if err != nil {
		return Credential{}, nil, err
	}
	return cred, tlsConfig, nil
}
