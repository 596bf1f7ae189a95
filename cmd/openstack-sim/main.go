// Command openstack-sim serves the OpenStack API simulator on loopback for
// the local sandbox and scripts. It prints the OS_* environment for one
// seeded application credential (stdout, nothing else goes there) and runs
// until SIGINT or SIGTERM.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"sigs.k8s.io/yaml"

	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("openstack-sim: ")
	seedPath := flag.String("seed", "", "seed YAML file (required)")
	listen := flag.String("listen", "127.0.0.1:0", "listen address; loopback only")
	credential := flag.String("credential", "vpn-operator", "application credential (by name) to print the environment for")
	cloudsYAML := flag.String("clouds-yaml", "", "also write a clouds.yaml (cloud \"openstack-sim\") to this path")
	readyFile := flag.String("ready-file", "", "write the environment to this file once listening")
	envDir := flag.String("env-dir", "", "also write <name>.env (the OS_* environment) for every application credential of the seed into this directory, readable by the owner only")
	hostOnly := flag.Bool("listen-host-only", false, "allow a non-loopback --listen address: only for an address inside a network that this machine's own namespaces reach (the local node world's pods), since the simulator trusts anyone who can reach it")
	flag.Parse()
	if err := run(*seedPath, *listen, *credential, *cloudsYAML, *readyFile, *envDir, *hostOnly); err != nil {
		log.Fatal(err)
	}
}

func run(seedPath, listen, credential, cloudsYAML, readyFile, envDir string, hostOnly bool) error {
	if seedPath == "" {
		return fmt.Errorf("--seed is required")
	}
	if !hostOnly {
		if err := loopbackOnly(listen); err != nil {
			return err
		}
	}
	seed, err := openstacksim.LoadSeed(seedPath)
	if err != nil {
		return err
	}
	// Listen for the stop signals before anything announces the simulator: whoever read
	// the environment (or the ready file) may send one at once, and a signal that comes
	// before Notify kills the process instead of stopping it.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	s, err := openstacksim.StartAt(seed, listen)
	if err != nil {
		return err
	}
	defer s.Close()
	id, secret, ok := s.AppCredential(credential)
	if !ok {
		return fmt.Errorf("seed has no application credential %q", credential)
	}
	env := envLines(s, id, secret)
	if cloudsYAML != "" {
		if err := writeCloudsYAML(cloudsYAML, s, id, secret); err != nil {
			return err
		}
	}
	if envDir != "" {
		for _, ac := range s.AppCredentials() {
			id, secret, _ := s.AppCredential(ac.Name)
			if err := writePrivate(filepath.Join(envDir, ac.Name+".env"), []byte(envLines(s, id, secret))); err != nil {
				return err
			}
		}
	}
	// The ready file comes last: whoever waits for it finds every other file written.
	if readyFile != "" {
		if err := writePrivate(readyFile, []byte(env)); err != nil {
			return err
		}
	}
	// The environment goes to stdout only; the log names the credential,
	// never its secret.
	fmt.Print(env)
	log.Printf("serving %s (credential %s); stop with SIGINT or SIGTERM", s.URL(), credential)

	<-sig
	log.Print("stopping")
	return nil
}

// loopbackOnly refuses to expose the simulator, which trusts anyone who can
// reach it, beyond this machine.
func loopbackOnly(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--listen %q: only loopback addresses are allowed", addr)
	}
	return nil
}

func envLines(s *openstacksim.Server, id, secret string) string {
	var b strings.Builder
	for _, kv := range [][2]string{
		{"OS_AUTH_URL", s.AuthURL()},
		{"OS_REGION_NAME", s.Region()},
		{"OS_AUTH_TYPE", "v3applicationcredential"},
		{"OS_IDENTITY_API_VERSION", "3"},
		{"OS_INTERFACE", "public"},
		{"OS_APPLICATION_CREDENTIAL_ID", id},
		{"OS_APPLICATION_CREDENTIAL_SECRET", secret},
	} {
		fmt.Fprintf(&b, "export %s=%s\n", kv[0], kv[1])
	}
	return b.String()
}

func writeCloudsYAML(path string, s *openstacksim.Server, id, secret string) error {
	doc := map[string]any{"clouds": map[string]any{"openstack-sim": map[string]any{
		"auth_type":            "v3applicationcredential",
		"region_name":          s.Region(),
		"interface":            "public",
		"identity_api_version": 3,
		"auth": map[string]any{
			"auth_url":                      s.AuthURL(),
			"application_credential_id":     id,
			"application_credential_secret": secret,
		},
	}}}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return err
	}
	return writePrivate(path, b)
}

// writePrivate writes atomically (a reader never sees half a file) and
// readable by the owner only, since the content carries a secret.
func writePrivate(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
