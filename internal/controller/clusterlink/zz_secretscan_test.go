package clusterlink

import (
	"encoding/json"
	"strings"
	"testing"

	v1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// Runs last (file and declaration order): every log line and Event captured over the
// whole suite, plus the statuses of a few credential scenarios run here so the scan
// never depends on which tests ran before, is searched for every Secret value seeded.
func TestZZNoSecretInLogsOrEvents(t *testing.T) {
	h := newHarness(t)
	h.secret("scan-ok", "diehl", nil)
	h.newLink("scan-ok", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	h.untilReady("scan-ok")
	h.secret("scan-priv", "diehl-admin", nil)
	h.newLink("scan-priv", "shoot--diehl--diehl02", "10.235.0.0/16", crossTenant(projDiehl))
	h.untilCond("scan-priv", v1.ConditionCredentialsResolved, v1.ReasonCredentialsPrivileged)
	h.secret("scan-bad", "diehl", map[string]string{"OS_APPLICATION_CREDENTIAL_SECRET": "ZZSECRET-scan-wrong-0b3"})
	secretValues = append(secretValues, "ZZSECRET-scan-wrong-0b3")
	h.newLink("scan-bad", "shoot--diehl--diehl02", "10.237.0.0/16", crossTenant(projDiehl))
	h.untilCond("scan-bad", v1.ConditionCredentialsResolved, v1.ReasonAuthFailed)
	if err := env.Client.Delete(h.ctx, h.secret("scan-ok", "diehl", nil)); err != nil {
		t.Fatal(err)
	}
	h.delete("scan-ok")
	h.untilCond("scan-ok", v1.ConditionCredentialsResolved, v1.ReasonCredentialsUnavailable)
	h.update("scan-ok", func(l *v1.ClusterLink) { l.Annotations[v1.AnnotationAbandonCustomerResources] = "true" })
	h.until("scan-ok", "gone", nil)

	var statuses []string
	for _, n := range []string{"scan-priv", "scan-bad"} {
		b, _ := json.Marshal(h.get(n))
		statuses = append(statuses, string(b))
	}

	captureMu.Lock()
	lines := append([]string(nil), captured...)
	captureMu.Unlock()
	lines = append(lines, statuses...)
	if len(lines) < 50 {
		t.Fatalf("only %d captured lines: the capture is not wired", len(lines))
	}
	if len(secretValues) < 10 {
		t.Fatalf("only %d secret values seeded", len(secretValues))
	}
	events := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "EVENT ") {
			events++
		}
		for _, s := range secretValues {
			if strings.Contains(l, s) {
				t.Errorf("a Secret value leaked: %q", l)
			}
		}
	}
	if events == 0 {
		t.Fatal("no Events captured")
	}
	t.Logf("scanned %d log lines, Events and statuses for %d Secret values", len(lines), len(secretValues))
}
