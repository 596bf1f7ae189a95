package chart

import (
	"strings"
	"testing"
)

// The gateway image values are the specification's names; any other key under images
// (the chart's former images.agent, a misspelling) fails `helm install` with the
// schema's message naming the key, so an estate's pin is never silently ignored (an
// ignored pin would roll every gateway pod on the next upgrade).
func TestImagesRefuseUnknownKeys(t *testing.T) {
	cases := []struct {
		name  string
		vals  map[string]any
		wants []string
	}{
		{"the former images.agent", with(requiredValues(), "images.agent.tag", "0.3.1"), []string{"images", "agent"}},
		{"misspelled images.gatewayWireGuard", with(requiredValues(), "images.gatewayWireGuard.tag", "0.3.1"), []string{"images", "gatewayWireGuard"}},
		{"misspelled tag key", with(requiredValues(), "images.gateway.tga", "0.3.1"), []string{"images/gateway", "tga"}},
		{"pull policy on a gateway image", with(requiredValues(), "images.statusAgent.pullPolicy", "Always"), []string{"images/statusAgent", "pullPolicy"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := renderChart(t, tc.vals, renderOpts{})
			if err == nil {
				t.Fatal("helm install accepted the values")
			}
			msg := err.Error()
			if !strings.Contains(msg, "schema") || !strings.Contains(msg, "additional properties") {
				t.Errorf("refused, but not as an unknown key by values.schema.json: %v", err)
			}
			for _, w := range tc.wants {
				if !strings.Contains(msg, w) {
					t.Errorf("the error does not name %q: %v", w, err)
				}
			}
			t.Logf("%v", err)
		})
	}
	// The three names of the specification are accepted, each with a pin.
	vals := with(requiredValues(), "images.gateway.tag", "0.3.1")
	vals = with(vals, "images.gatewayWireguard.tag", "0.3.1")
	vals = with(vals, "images.statusAgent.tag", "0.3.1")
	r := mustRender(t, vals)
	_, c := r.operator(t)
	env := envMap(t, c)
	for _, name := range []string{"IPSEC_GATEWAY_IMAGE", "IPSEC_GATEWAY_WIREGUARD_IMAGE", "IPSEC_AGENT_IMAGE"} {
		if !strings.HasSuffix(env[name].Value, ":0.3.1") {
			t.Errorf("%s = %q, want the pin 0.3.1", name, env[name].Value)
		}
	}
	if strings.Contains(r.notes, "restarts every gateway pod") {
		t.Errorf("NOTES warn about rolls although every gateway image is pinned:\n%s", r.notes)
	}
	if r := mustRender(t, with(requiredValues(), "images.gateway.tag", "0.3.1")); !strings.Contains(r.notes, "images.gatewayWireguard.tag") {
		t.Errorf("NOTES do not name the unpinned images:\n%s", r.notes)
	}
}
