package migrate

import (
	"bytes"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// Manifest renders the gateway (and, with Options.IncludeSecrets, the Secrets) as YAML
// documents, without status or server-set fields.
func (r *Result) Manifest() ([]byte, error) {
	var objs []runtime.Object
	for _, s := range r.Secrets {
		objs = append(objs, s)
	}
	objs = append(objs, r.Gateway)
	var b bytes.Buffer
	for i, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return nil, err
		}
		delete(m, "status")
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		pruneEmpty(m)
		y, err := yaml.Marshal(m)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}

// Report is the human summary: what became what, every setting not carried over with
// its reason, and the steps left. It never contains a key.
func (r *Result) Report(in Input) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	if r.Gateway != nil {
		p("IPsecGateway %s/%s from %s:", r.Gateway.Namespace, r.Gateway.Name, in.Path)
		if r.Gateway.Spec.Endpoint != nil {
			p("  floating IP   %s (from %s)", r.Gateway.Spec.Endpoint.FloatingIP, r.FloatingIPSource)
		} else {
			p("  floating IP   none pinned: the operator allocates a new one")
		}
		for _, t := range r.Tunnels {
			key := "key not found in the input"
			if t.PSKFound {
				key = "key found in " + t.PSKFromWhat
			}
			p("  tunnel %-12s peer %s, networks %s <- %s", t.Name, t.Peer, strings.Join(t.Subnets, ", "), strings.Join(t.From, " + "))
			p("         %-12s pre-shared key: Secret %s, key psk (%s)", "", t.SecretName, key)
		}
	}
	if len(r.Notes) > 0 {
		p("")
		p("Check:")
		for _, n := range r.Notes {
			p("  - %s", n)
		}
	}
	p("")
	if len(r.Dropped) == 0 {
		p("Every setting was carried over.")
	} else {
		p("Not carried over (%d):", len(r.Dropped))
		for _, d := range r.Dropped {
			if d.Value != "" {
				p("  - %s = %s: %s", d.Setting, d.Value, d.Reason)
			} else {
				p("  - %s: %s", d.Setting, d.Reason)
			}
		}
	}
	if r.Gateway == nil {
		return r.scrub(b.String())
	}
	p("")
	p("Next (docs/runbooks/vm-migration.md):")
	step := 1
	for _, t := range r.Tunnels {
		if len(r.Secrets) == 0 || !t.PSKFound {
			p("  %d. kubectl -n %s create secret generic %s --from-literal=psk='<the tunnel's pre-shared key>'", step, r.Gateway.Namespace, t.SecretName)
			step++
		}
	}
	p("  %d. Add spec.exposures for the services the clients reach (the VM's local traffic selectors above).", step)
	step++
	if r.Gateway.Spec.Endpoint != nil {
		p("  %d. Disassociate %s from the VM (openstack floating ip unset --port %s), then apply the manifest;", step, r.Gateway.Spec.Endpoint.FloatingIP, r.Gateway.Spec.Endpoint.FloatingIP)
		p("     applied first, the gateway stops at FloatingIPReady=False/FloatingIPInUse until the address is free.")
	} else {
		p("  %d. Apply the manifest; tell every client the new gateway address (status.floatingIP).", step)
	}
	step++
	p("  %d. Each client changes its remote traffic selector to the gateway's status.serviceCIDR.", step)
	return r.scrub(b.String())
}

// scrub is the report's last check: the parsers and drop never put key material into
// the report, and should one of them be wrong, no key read from the input leaves it.
// Shorter strings are not searched for: they would blank out ordinary words, and the
// gateway refuses keys that short anyway.
func (r *Result) scrub(report string) string {
	for _, k := range r.keys {
		if len(k) >= 8 {
			report = strings.ReplaceAll(report, k, "<key not shown>")
		}
	}
	return report
}

// pruneEmpty removes empty objects (a tunnel's unset dpd, ike or esp) so the manifest
// shows only what was carried over; the API server fills in its defaults.
func pruneEmpty(v any) {
	switch x := v.(type) {
	case map[string]any:
		for k, c := range x {
			pruneEmpty(c)
			if m, ok := c.(map[string]any); ok && len(m) == 0 {
				delete(x, k)
			}
		}
	case []any:
		for _, c := range x {
			pruneEmpty(c)
		}
	}
}
