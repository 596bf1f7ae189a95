package migrate

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var env *testenv.Env

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	testenv.Main(m, &env)
}

type corpusCase struct {
	conf, secrets string
}

var corpus = []corpusCase{
	{"swanctl-site-to-site.conf", ""},
	{"swanctl-mixed.conf", ""},
	{"swanctl-pfsense-generated.conf", ""},
	{"ipsec-legacy.conf", "ipsec-legacy.secrets"},
	{"ipsec-cloud-vti.conf", "ipsec-cloud-vti.secrets"},
}

func load(t *testing.T, c corpusCase) Input {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "corpus", c.conf))
	if err != nil {
		t.Fatal(err)
	}
	in := Input{Path: c.conf, Text: string(b)}
	if c.secrets != "" {
		s, err := os.ReadFile(filepath.Join("testdata", "corpus", c.secrets))
		if err != nil {
			t.Fatal(err)
		}
		in.Secrets = string(s)
	}
	return in
}

func checkGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (run with -update to accept):\n%s", name, got)
	}
}

// Every corpus file migrates to a manifest and a report that match the golden files, the
// report never contains a key, and the manifest passes Validate (Migrate checks it).
func TestCorpus(t *testing.T) {
	for _, c := range corpus {
		t.Run(c.conf, func(t *testing.T) {
			in := load(t, c)
			res, err := Migrate(in, Options{Name: "vpn", Namespace: "tenant-a", IncludeSecrets: true})
			if err != nil {
				t.Fatalf("%v\n%s", err, res.Report(in))
			}
			man, err := res.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			checkGolden(t, strings.TrimSuffix(c.conf, ".conf")+".yaml.golden", man)
			report := res.Report(in)
			checkGolden(t, strings.TrimSuffix(c.conf, ".conf")+".report.golden", []byte(report))
			for _, s := range res.Secrets {
				if strings.Contains(report, string(s.Data["psk"])) {
					t.Errorf("the report contains the key of %s", s.Name)
				}
			}
			if strings.Contains(report, "corpus-") {
				t.Error("the report contains a key from the corpus")
			}
		})
	}
}

// Without --include-secrets no key appears in the manifest.
func TestNoSecretsByDefault(t *testing.T) {
	for _, c := range corpus {
		in := load(t, c)
		res, err := Migrate(in, Options{Name: "vpn", Namespace: "tenant-a"})
		if err != nil {
			t.Fatal(err)
		}
		man, _ := res.Manifest()
		if len(res.Secrets) != 0 || strings.Contains(string(man), "kind: Secret") || strings.Contains(string(man), "psk:") {
			t.Errorf("%s: a Secret or key in the manifest without IncludeSecrets:\n%s", c.conf, man)
		}
		if !strings.Contains(res.Report(in), "create secret generic") {
			t.Errorf("%s: the report does not say which Secret to create", c.conf)
		}
	}
}

func TestMigrationFacts(t *testing.T) {
	// site-to-site: FIP inferred from the VM's IKE identity (its fixed IP is private);
	// the local traffic selectors are named as not carried, with the reason.
	in := load(t, corpus[0])
	res, err := Migrate(in, Options{Name: "vpn", Namespace: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Gateway.Spec.Endpoint == nil || res.Gateway.Spec.Endpoint.FloatingIP != "203.0.113.10" {
		t.Errorf("floating IP %+v, want 203.0.113.10 from the VM's identity", res.Gateway.Spec.Endpoint)
	}
	tun := res.Gateway.Spec.Tunnels[0]
	if tun.Peer.ID != "vpn.acme.example" || strings.Join(tun.Peer.Subnets, ",") != "192.168.10.0/24,192.168.20.0/24" ||
		tun.IKE.Lifetime != "8h" || tun.ESP.Lifetime != "1h" || tun.DPD.Action != "restart" {
		t.Errorf("tunnel %+v", tun)
	}
	if !hasDropped(res, "connections.acme-hq.children.acme-hq-net.local_ts", "spec.exposures") {
		t.Errorf("local_ts not reported with the exposures advice: %+v", res.Dropped)
	}
	// An explicit --floating-ip wins, and a different VM identity is a client change.
	res, err = Migrate(in, Options{Name: "vpn", Namespace: "tenant-a", FloatingIP: "203.0.113.99"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Gateway.Spec.Endpoint.FloatingIP != "203.0.113.99" || !strings.Contains(strings.Join(res.Notes, "\n"), "remote identity") {
		t.Errorf("--floating-ip: %+v notes %v", res.Gateway.Spec.Endpoint, res.Notes)
	}

	// legacy: the two conns to one peer are one tunnel; IKEv1 and %any peers are refused by name.
	in = load(t, corpus[3])
	res, err = Migrate(in, Options{Name: "vpn", Namespace: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Gateway.Spec.Tunnels) != 1 || strings.Join(res.Gateway.Spec.Tunnels[0].Peer.Subnets, ",") != "192.168.60.0/24,192.168.61.0/24" {
		t.Errorf("legacy tunnels %+v", res.Gateway.Spec.Tunnels)
	}
	if !hasDropped(res, "conn oldpartner: keyexchange", "IKEv2 only") || !hasDropped(res, "conn dyn-partner: right", "static IPv4") {
		t.Errorf("refusals not named: %+v", res.Dropped)
	}
	if !res.Tunnels[0].PSKFound || res.Tunnels[0].PSKFromWhat != "ipsec.secrets line 2" {
		t.Errorf("PSK lookup: %+v", res.Tunnels[0])
	}

	// cloud VTI: 0.0.0.0/0 holds the peer's own address and is not carried.
	res, err = Migrate(load(t, corpus[4]), Options{Name: "vpn", Namespace: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Gateway.Spec.Tunnels) != 1 || res.Gateway.Spec.Tunnels[0].Peer.Address != "198.51.100.81" || !hasDropped(res, "0.0.0.0/0", "peer's own address") {
		t.Errorf("cloud VTI: %+v dropped %+v", res.Gateway.Spec.Tunnels, res.Dropped)
	}
}

func TestNothingToMigrate(t *testing.T) {
	_, err := Migrate(Input{Path: "x.conf", Text: "conn a\n    keyexchange=ikev1\n    right=198.51.100.1\n    rightsubnet=10.9.0.0/24\n"}, Options{Name: "vpn", Namespace: "n"})
	if !errors.Is(err, ErrNothingToMigrate) {
		t.Errorf("only IKEv1: %v", err)
	}
	if _, err := Migrate(Input{Path: "x", Text: "connections {\n}\n"}, Options{Name: "vpn", Namespace: "n"}); !errors.Is(err, ErrNothingToMigrate) {
		t.Errorf("empty: %v", err)
	}
	if _, err := Migrate(Input{Path: "x", Text: "conn a\n"}, Options{Name: "vpn", Namespace: "n", FloatingIP: "nope"}); err == nil {
		t.Error("a bad --floating-ip accepted")
	}
}

func hasDropped(r *Result, settingPart, reasonPart string) bool {
	for _, d := range r.Dropped {
		if (strings.Contains(d.Setting, settingPart) || strings.Contains(d.Value, settingPart)) && strings.Contains(d.Reason, reasonPart) {
			return true
		}
	}
	return false
}

// The manifests are accepted by the real API server's admission (schema and CEL rules),
// with strict field validation, Secrets included.
func TestManifestsAdmitted(t *testing.T) {
	testenv.Need(t)
	ctx := context.Background()
	if err := env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a"}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range corpus {
		t.Run(c.conf, func(t *testing.T) {
			res, err := Migrate(load(t, c), Options{Name: "vpn", Namespace: "tenant-a", IncludeSecrets: true})
			if err != nil {
				t.Fatal(err)
			}
			man, err := res.Manifest()
			if err != nil {
				t.Fatal(err)
			}
			dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(man), 4096)
			n := 0
			for {
				var u unstructured.Unstructured
				if err := dec.Decode(&u.Object); err != nil {
					if errors.Is(err, io.EOF) {
						break
					}
					t.Fatal(err)
				}
				n++
				if err := env.Client.Create(ctx, &u, client.DryRunAll, client.FieldValidation("Strict")); err != nil {
					t.Errorf("%s %s refused: %v", u.GetKind(), u.GetName(), err)
				}
			}
			if n != 1+len(res.Secrets) {
				t.Errorf("%d objects decoded, want %d", n, 1+len(res.Secrets))
			}
		})
	}
}
