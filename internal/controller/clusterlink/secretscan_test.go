package clusterlink

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
)

// A few credential scenarios (accepted, privileged, refused, deleted with its Secret
// gone) run here, and every log line and Event captured so far plus their statuses is
// searched for every Secret value seeded. It passes in any order: what the rest of the
// suite logs is scanned once more after the last test (scanSuite, from TestMain).
func TestNoSecretInLogsOrEvents(t *testing.T) {
	h := newHarness(t)
	h.secret("scan-ok", "diehl", nil)
	h.newLink("scan-ok", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	h.untilReady("scan-ok")
	h.secret("scan-priv", "diehl-admin", nil)
	h.newLink("scan-priv", "shoot--diehl--diehl02", "10.235.0.0/16", crossTenant(projDiehl))
	h.untilCond("scan-priv", v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonCredentialsPrivileged)
	h.secret("scan-bad", "diehl", map[string]string{"OS_APPLICATION_CREDENTIAL_SECRET": "ZZSECRET-scan-wrong-0b3"})
	secretValues = append(secretValues, "ZZSECRET-scan-wrong-0b3")
	h.newLink("scan-bad", "shoot--diehl--diehl02", "10.237.0.0/16", crossTenant(projDiehl))
	h.untilCond("scan-bad", v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonAuthFailed)
	if err := env.Client.Delete(h.ctx, h.secret("scan-ok", "diehl", nil)); err != nil {
		t.Fatal(err)
	}
	h.delete("scan-ok")
	h.untilCond("scan-ok", v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonCredentialsUnavailable)
	h.update("scan-ok", func(l *v1alpha1.ClusterLink) { l.Annotations[v1alpha1.AnnotationAbandonCustomerResources] = "true" })
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
	for _, leak := range leaks(lines) {
		t.Errorf("a Secret value leaked: %q", leak)
	}
	events := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "EVENT ") {
			events++
		}
	}
	if events == 0 {
		t.Fatal("no Events captured")
	}
	t.Logf("scanned %d log lines, Events and statuses for %d Secret values", len(lines), len(secretValues))
}

// leaks are the lines that hold a seeded Secret value.
func leaks(lines []string) []string {
	var out []string
	for _, l := range lines {
		for _, s := range secretValues {
			if strings.Contains(l, s) {
				out = append(out, l)
				break
			}
		}
	}
	return out
}

// scanSuite searches everything the whole suite logged and every Event it recorded,
// once the last test has run, whatever ran before it.
func scanSuite() error {
	captureMu.Lock()
	lines := append([]string(nil), captured...)
	captureMu.Unlock()
	if l := leaks(lines); len(l) > 0 {
		return fmt.Errorf("%d log lines or Events hold a Secret value, the first: %q", len(l), l[0])
	}
	return nil
}
