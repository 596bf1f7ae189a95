package openstack

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestOwnerTagsRoundTrip(t *testing.T) {
	o := Owner{Kind: "IPsecGateway", Namespace: "tenant-a", Name: "gw1", UID: "0b7c8f1e-3b0d-4a57-9d1e-7d2f4c1a9e10"}
	tags := o.Tags()
	want := []string{
		"bnerd-vpn-operator",
		"bnerd.net/kind=IPsecGateway",
		"bnerd.net/owner=tenant-a/gw1",
		"bnerd.net/uid=0b7c8f1e-3b0d-4a57-9d1e-7d2f4c1a9e10",
	}
	if strings.Join(tags, "|") != strings.Join(want, "|") {
		t.Fatalf("Tags() = %q, want %q", tags, want)
	}
	got, ok := OwnerFromTags(append([]string{"foreign"}, tags...))
	if !ok || got != o {
		t.Fatalf("OwnerFromTags = %+v, %v; want %+v", got, ok, o)
	}
	if !o.OwnedBy(tags) {
		t.Error("OwnedBy(own tags) = false")
	}
	other := o
	other.UID = "another"
	if other.OwnedBy(tags) {
		t.Error("a recreated owner (new UID) must not own the old object")
	}

	cl := Owner{Kind: "ClusterLink", Name: "diehl01", UID: "u1"}
	if tags := cl.Tags(); tags[2] != "bnerd.net/owner=diehl01" {
		t.Errorf("cluster-scoped owner tag = %q", tags[2])
	}
	if got, ok := OwnerFromTags(cl.Tags()); !ok || got != cl {
		t.Errorf("cluster-scoped round trip = %+v, %v", got, ok)
	}
	if _, ok := OwnerFromTags([]string{"bnerd.net/uid=x"}); ok {
		t.Error("tags without the managed marker must not parse as owned")
	}
}

func TestSanitizeTag(t *testing.T) {
	if got := SanitizeTag("bnerd.net/owner=ns/name"); got != "bnerd.net/owner=ns/name" {
		t.Errorf("clean tag changed: %q", got)
	}
	a, b := SanitizeTag("a,b"), SanitizeTag("a_b")
	if strings.Contains(a, ",") {
		t.Errorf("comma survived: %q", a)
	}
	if a == b {
		t.Errorf("%q and %q collide after sanitising", "a,b", "a_b")
	}
	if SanitizeTag("x\ny") == "x\ny" || strings.ContainsRune(SanitizeTag("x\ny"), '\n') {
		t.Error("control character survived")
	}
	long := strings.Repeat("ü", 400)
	s1, s2 := SanitizeTag(long), SanitizeTag(long+"x")
	if n := utf8.RuneCountInString(s1); n > MaxTagLength {
		t.Errorf("long tag has %d runes", n)
	}
	if !utf8.ValidString(s1) {
		t.Error("truncation broke UTF-8")
	}
	if s1 == s2 {
		t.Error("distinct long tags collide")
	}
	if SanitizeTag(long) != s1 {
		t.Error("SanitizeTag is not deterministic")
	}
	exact := strings.Repeat("a", MaxTagLength)
	if SanitizeTag(exact) != exact {
		t.Error("a tag of exactly the limit must be kept")
	}
}

func TestResourceName(t *testing.T) {
	if got := ResourceName("IPsecGateway", "tenant-a", "gw1"); got != "bnerd-vpn-ipsecgateway-tenant-a-gw1" {
		t.Errorf("ResourceName = %q", got)
	}
	if got := ResourceName("leg", "", "svc01-link"); got != "bnerd-vpn-leg-svc01-link" {
		t.Errorf("cluster-scoped ResourceName = %q", got)
	}
	ns := strings.Repeat("n", 63)
	n1 := ResourceName("port", ns, "gateway-one")
	n2 := ResourceName("port", ns, "gateway-two")
	if len(n1) > MaxNameLength || len(n2) > MaxNameLength {
		t.Errorf("names too long: %d, %d", len(n1), len(n2))
	}
	if n1 == n2 {
		t.Errorf("shortened names collide: %q", n1)
	}
	if !strings.HasPrefix(n1, "bnerd-vpn-port-") {
		t.Errorf("shortened name lost its prefix: %q", n1)
	}
	if ResourceName("port", ns, "gateway-one") != n1 {
		t.Error("ResourceName is not deterministic")
	}
	if got := ResourceName("port", "ns", "a b"); strings.Contains(got, " ") || got == ResourceName("port", "ns", "a_b") {
		t.Errorf("unsafe characters not handled distinctly: %q", got)
	}
}

func TestHasTags(t *testing.T) {
	if !HasTags([]string{"a", "b", "c"}, "c", "a") {
		t.Error("subset not found")
	}
	if HasTags([]string{"a"}, "a", "b") {
		t.Error("missing tag not noticed")
	}
	if !HasTags(nil) {
		t.Error("empty want must match")
	}
}

func TestServiceCIDRTag(t *testing.T) {
	owner := Owner{Kind: "IPsecGateway", Namespace: "ns", Name: "gw", UID: "u1"}
	tags := WithServiceCIDR(owner.Tags(), "100.64.3.0/24")
	if got := ServiceCIDRTag(tags); got != "100.64.3.0/24" {
		t.Fatalf("ServiceCIDRTag = %q", got)
	}
	if !owner.OwnedBy(tags) {
		t.Fatal("the record dropped the owner's tags")
	}
	moved := WithServiceCIDR(tags, "100.64.4.0/24")
	if got := ServiceCIDRTag(moved); got != "100.64.4.0/24" || len(moved) != len(tags) {
		t.Fatalf("replaced record %q in %v", got, moved)
	}
	if got := ServiceCIDRTag(WithServiceCIDR(tags, "")); got != "" {
		t.Fatalf("removed record still reads %q", got)
	}
}
