package realopenstack

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/gophercloud/gophercloud/v2"
	gcos "github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/floatingips"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/controller/clusterlink"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/realstack"
)

// A gateway pinned to a floating IP an admin allocated in the operator's project (only
// an admin may choose an address), listed in the tenant's policy: the address is adopted, and
// associated with the gateway's port, carrying only the gateway's pinned-by tag; after the
// delete it still exists, untagged and unassociated, for its owner to keep.
func TestPinnedFloatingIP(t *testing.T) { forReleases(t, pinnedFloatingIP) }

func pinnedFloatingIP(t *testing.T, rel realstack.Release) {
	r := newRig(t, rel)
	nc := r.adminNetwork()
	project, err := r.cloud.ID("projects", "vpn-operator")
	if err != nil {
		t.Fatal(err)
	}
	public, err := r.os.Networking.ResolveNetwork(r.ctx, r.cfg.ExternalNetwork)
	if err != nil {
		t.Fatal(err)
	}
	fip, err := floatingips.Create(r.ctx, nc, floatingips.CreateOpts{FloatingNetworkID: public.ID, ProjectID: project,
		Description: "pinned by test/openstack"}).Extract()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = floatingips.Delete(context.Background(), nc, fip.ID).ExtractErr() })

	// Only a pin the tenant's policy lists is adopted (docs/gateway.md).
	pol := &v1alpha1.VPNTenantPolicy{}
	if err := env.Client.Get(r.ctx, client.ObjectKey{Name: "rig-" + r.ns}, pol); err != nil {
		t.Fatal(err)
	}
	pol.Spec.FloatingIPs = append(pol.Spec.FloatingIPs, fip.FloatingIP)
	if err := env.Client.Update(r.ctx, pol); err != nil {
		t.Fatal(err)
	}
	r.psk("hq-psk", "correct horse battery staple")
	gw := &v1alpha1.IPsecGateway{ObjectMeta: metav1.ObjectMeta{Namespace: r.ns, Name: "pinned"}, Spec: gatewaySpec(false)}
	gw.Spec.Endpoint = &v1alpha1.Endpoint{FloatingIP: fip.FloatingIP}
	if err := env.Client.Create(r.ctx, gw); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.deleteAndWait(gw) })
	st := r.gatewayReady("pinned").Status
	if st.FloatingIP != fip.FloatingIP || st.FloatingIPID != fip.ID {
		t.Errorf("status floating IP %s (%s), want the pinned %s (%s)", st.FloatingIP, st.FloatingIPID, fip.FloatingIP, fip.ID)
	}
	got, err := r.os.Networking.GetFloatingIP(r.ctx, fip.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.PortID != st.PortID {
		t.Errorf("pinned floating IP on port %q, want the gateway's %q", got.PortID, st.PortID)
	}
	// While in use it carries the gateway's pinned-by tag (so no other gateway can take
	// it) and nothing else of the operator's.
	if want := []string{openstack.TagPinnedByPrefix + string(gw.UID)}; !slices.Equal(got.Tags, want) {
		t.Errorf("pinned floating IP's tags %v, want %v", got.Tags, want)
	}
	r.steadyState(gw)
	r.deleteAndWait(gw)
	got, err = r.os.Networking.GetFloatingIP(r.ctx, fip.ID)
	if err != nil {
		t.Fatalf("the pinned floating IP after the delete: %v (it must stay)", err)
	}
	if got.PortID != "" || len(got.Tags) != 0 {
		t.Errorf("the pinned floating IP after the delete: port %q, tags %v; want unassociated and untagged", got.PortID, got.Tags)
	}
	r.audit(gw.UID)
}

// adminNetwork is a plain gophercloud Neutron client of the estate's admin.
func (r *rig) adminNetwork() *gophercloud.ServiceClient {
	r.t.Helper()
	cred, err := r.cloud.Credential("admin")
	if err != nil {
		r.t.Fatal(err)
	}
	provider, err := gcos.AuthenticatedClient(r.ctx, gophercloud.AuthOptions{IdentityEndpoint: cred.AuthURL,
		ApplicationCredentialID: cred.AppCredentialID, ApplicationCredentialSecret: cred.AppCredentialSecret, AllowReauth: true})
	if err != nil {
		r.t.Fatal(err)
	}
	nc, err := gcos.NewNetworkV2(provider, gophercloud.EndpointOpts{Region: "RegionOne"})
	if err != nil {
		r.t.Fatal(err)
	}
	return nc
}

// leastRoleCase is what one credential of the estate does on a release: the pair
// member and reader with one role removed, or a role that is neither.
type leastRoleCase struct {
	credential string
	// refusedFor is the role the operator's check names (the operator does not start,
	// the link does not converge), "" when it accepts the credential.
	refusedFor string
	// failure is the gateway's first failing phase condition with the check bypassed,
	// "Type/Reason: text in the message"; "" where the credential works (the
	// conformance case LeastRoles shows every operation succeed, so no gateway is run).
	failure string
}

// leastRoles is the table the test proves, per release. Zed's legacy defaults let any
// role of the project read and write: every credential here works, and the check
// refuses the ones without member anyway. 2025.1's secure-RBAC defaults give reads to
// reader and writes to member, and its Keystone puts the reader member implies into the
// token: member alone works; reader alone reads but its first write is refused; a role
// that is neither (load-balancer_member) does not even find the gateway network.
var leastRoles = map[realstack.Release][]leastRoleCase{
	realstack.Zed: {
		{credential: "vpn-operator-member-only"},
		{credential: "vpn-operator-readonly", refusedFor: openstack.RoleMember},
		{credential: "vpn-operator-lb-only", refusedFor: openstack.RoleMember},
	},
	realstack.R2025_1: {
		{credential: "vpn-operator-member-only"},
		{credential: "vpn-operator-readonly", refusedFor: openstack.RoleMember,
			failure: v1alpha1.ConditionPortReady + "/" + v1alpha1.ReasonPortFailed + ": HTTP 403"},
		{credential: "vpn-operator-lb-only", refusedFor: openstack.RoleMember,
			failure: v1alpha1.ConditionPortReady + "/" + v1alpha1.ReasonPortFailed + `: resolve network "vpn-transit": not found`},
	},
}

// customerLeastRoles: the customer's credential on a cross-tenant link, per release: the
// role the link's CredentialsRoleMissing names. (The credentials that work are shown by
// the conformance case LeastRoles and, with member and reader, by
// TestReverseGatewayAndClusterLinks.)
var customerLeastRoles = map[realstack.Release]map[string]string{
	realstack.Zed:     {"customer-diehl-reader-only": openstack.RoleMember},
	realstack.R2025_1: {"customer-diehl-reader-only": openstack.RoleMember},
}

// The least roles, found by test on each release. The operator's and the customer's
// credentials with member and reader work everywhere (the other tests of this package
// run on them); here each role is removed in turn, and a role that is neither is tried.
// For the operator's credential: what the operator's start check (openstack.CheckRoles,
// as main runs it) says, and, where the credential cannot work, what the gateway
// reconciler does with the check bypassed: which phase fails, with which condition.
// For a customer's credential: the cross-tenant link's CredentialsRoleMissing naming the
// role.
func TestLeastRoles(t *testing.T) { forReleases(t, leastRolesOn) }

func leastRolesOn(t *testing.T, rel realstack.Release) {
	for _, tc := range leastRoles[rel] {
		t.Run("operator/"+tc.credential, func(t *testing.T) {
			r := newRigAs(t, rel, tc.credential)
			token, err := r.os.Identity.TokenInfo(r.ctx)
			if err != nil {
				t.Fatal(err)
			}
			var probe error
			if openstack.NeedsProbe(token.Roles) {
				probe = openstack.ProbeOwnProject(r.ctx, r.os.Networking, token.ProjectID)
			}
			warning, err := openstack.CheckRoles(token.Roles, probe)
			t.Logf("%s on %s: token roles %v; start check: %v %s", tc.credential, rel, token.Roles, err, warning)
			switch {
			case tc.refusedFor == "" && err != nil:
				t.Errorf("the start check refuses %s: %v", tc.credential, err)
			case tc.refusedFor != "" && (err == nil || !strings.Contains(err.Error(), "lacks the "+tc.refusedFor+" role")):
				t.Errorf("the start check on %s: %v; want a refusal naming the %s role", tc.credential, err, tc.refusedFor)
			}
			if tc.failure == "" {
				return
			}
			// The reconciler with the check bypassed.
			r.psk("hq-psk", "correct horse battery staple")
			gw := r.createGateway("roles", false)
			got := r.firstOutcome(gw)
			t.Logf("%s on %s, the gateway with the check bypassed: %s", tc.credential, rel, got)
			want, text, _ := strings.Cut(tc.failure, ": ")
			if !strings.HasPrefix(got, want+": ") || !strings.Contains(got, text) {
				t.Errorf("the gateway: %s; want %s", got, tc.failure)
			}
			r.deleteAndWait(gw)
			// What the crippled credential could not see, the full one audits.
			r.auditWith(map[string]*openstack.Clients{"operator": r.clients("vpn-operator"), "customer": r.customer}, gw.UID)
		})
	}
	for cred, role := range customerLeastRoles[rel] {
		t.Run("customer/"+cred, func(t *testing.T) {
			r := newRig(t, rel)
			link := r.crossTenantLink("roles", cred)
			verdict := r.linkOutcome(link)
			t.Logf("%s on %s, a cross-tenant link: %s", cred, rel, verdict)
			if !strings.HasPrefix(verdict, v1alpha1.ConditionCredentialsResolved+"/"+v1alpha1.ReasonCredentialsRoleMissing+": ") ||
				!strings.Contains(verdict, "lacks the "+role+" role") {
				t.Errorf("the link: %s; want %s/%s naming the %s role", verdict, v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonCredentialsRoleMissing, role)
			}
			r.deleteAndWait(link)
			r.audit(link.UID)
		})
	}
}

// firstOutcome waits until the gateway converges ("converged") or one of its phase
// conditions turns False for the current generation ("Type/Reason: message").
func (r *rig) firstOutcome(gw *v1alpha1.IPsecGateway) string {
	r.t.Helper()
	var outcome string
	eventually(r.t, "gateway "+gw.Name+" converged or refused", func() (bool, string) {
		var cur v1alpha1.IPsecGateway
		if err := env.Client.Get(r.ctx, client.ObjectKeyFromObject(gw), &cur); err != nil {
			return false, err.Error()
		}
		converged := true
		for _, typ := range v1alpha1.GatewayPhaseConditionTypes {
			c := meta.FindStatusCondition(cur.Status.Conditions, typ)
			if c == nil || c.ObservedGeneration != cur.Generation {
				converged = false
				continue
			}
			if c.Status == metav1.ConditionFalse && c.Reason != v1alpha1.ReasonNotReady {
				outcome = fmt.Sprintf("%s/%s: %s", c.Type, c.Reason, c.Message)
				return true, ""
			}
			if c.Status != metav1.ConditionTrue {
				converged = false
			}
		}
		if converged {
			outcome = "converged"
		}
		return converged, condString(cur.Status.Conditions)
	})
	return outcome
}

// crossTenantLink makes a cross-tenant ClusterLink to the customer's diehl01 with the
// estate's credential cred in its Secret, and the namespace labels it needs.
func (r *rig) crossTenantLink(name, cred string) *v1alpha1.ClusterLink {
	r.t.Helper()
	custProject, err := r.cloud.ID("projects", "customer-diehl")
	if err != nil {
		r.t.Fatal(err)
	}
	c, err := r.cloud.Credential(cred)
	if err != nil {
		r.t.Fatal(err)
	}
	var nsObj corev1.Namespace
	if err := env.Client.Get(r.ctx, types.NamespacedName{Name: r.ns}, &nsObj); err != nil {
		r.t.Fatal(err)
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels[v1alpha1.LabelCustomerProject] = custProject
	if err := env.Client.Update(r.ctx, &nsObj); err != nil {
		r.t.Fatal(err)
	}
	linkName := r.linkName(name)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: r.cfg.ClusterLinkCredentialsNamespace, Name: clusterlink.SecretNamePrefix + linkName},
		Data: map[string][]byte{openstack.EnvAppCredentialID: []byte(c.AppCredentialID), openstack.EnvAppCredentialSecret: []byte(c.AppCredentialSecret)}}
	if err := env.Client.Create(r.ctx, secret); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { _ = env.Client.Delete(context.Background(), secret) })
	link := &v1alpha1.ClusterLink{
		ObjectMeta: metav1.ObjectMeta{Name: linkName, Annotations: map[string]string{v1alpha1.AnnotationCustomerAPIAccess: "none"}},
		Spec: v1alpha1.ClusterLinkSpec{ServiceClusterRouter: "shoot--diehl--diehl01", ServiceClusterCIDR: "10.234.0.0/16",
			CredentialsSecretRef: &v1alpha1.SecretRef{Name: secret.Name, Namespace: secret.Namespace}, CustomerProjectID: custProject},
	}
	if err := env.Client.Create(r.ctx, link); err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { r.deleteAndWait(link) })
	return link
}

// linkOutcome waits until the link is Ready ("Ready") or its credentials are refused
// ("CredentialsResolved/Reason: message").
func (r *rig) linkOutcome(link *v1alpha1.ClusterLink) string {
	r.t.Helper()
	var outcome string
	eventually(r.t, "ClusterLink "+link.Name+" Ready or refused", func() (bool, string) {
		var cur v1alpha1.ClusterLink
		if err := env.Client.Get(r.ctx, client.ObjectKeyFromObject(link), &cur); err != nil {
			return false, err.Error()
		}
		if meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReady) {
			outcome = "Ready"
			return true, ""
		}
		if c := meta.FindStatusCondition(cur.Status.Conditions, v1alpha1.ConditionCredentialsResolved); c != nil && c.Status == metav1.ConditionFalse &&
			slices.Contains([]string{v1alpha1.ReasonCredentialsRoleMissing, v1alpha1.ReasonCredentialsPrivileged, v1alpha1.ReasonAuthFailed}, c.Reason) {
			outcome = fmt.Sprintf("%s/%s: %s", c.Type, c.Reason, c.Message)
			return true, ""
		}
		return false, condString(cur.Status.Conditions)
	})
	return outcome
}
