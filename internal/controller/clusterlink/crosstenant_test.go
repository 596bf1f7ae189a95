package clusterlink

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
	"bnerd.net/vpn-operator/internal/testinfra/openstacksim"
)

const (
	diehlRouter = "shoot--diehl--diehl01"
	diehlCIDR   = "10.234.0.0/16"
)

func custPrefix(link string) string {
	return "customer credential (secret " + credNS + "/" + SecretNamePrefix + link + "): "
}

func secretPrefix(link string) string {
	return "secret " + credNS + "/" + SecretNamePrefix + link + ": "
}

// The whole cross-tenant shape converges: attested, credential resolved (a member
// credential also carrying load-balancer_admin and _member_ passes), the network shared
// with exactly that project, a leg in the customer's project on the customer's router,
// the gateway route on the operator's router.
func TestCrossTenantLinks(t *testing.T) {
	h := newHarness(t)
	h.secret("diehl01", "diehl", nil)
	h.newLink("diehl01", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	l := h.untilReady("diehl01")

	expectCond(t, l, v1alpha1.ConditionTenantIsolationAttested, metav1.ConditionTrue, v1alpha1.ReasonAttested, "")
	expectCond(t, l, v1alpha1.ConditionCredentialsResolved, metav1.ConditionTrue, v1alpha1.ReasonResolved, "secret "+credNS+"/clusterlink-diehl01 authenticates into project "+projDiehl)
	expectCond(t, l, v1alpha1.ConditionTransitNetworkShared, metav1.ConditionTrue, v1alpha1.ReasonShared, "transit network "+h.transitNetID()+" is shared with project "+projDiehl)
	if l.Status.CustomerProjectID != projDiehl {
		t.Fatalf("status.customerProjectID %q", l.Status.CustomerProjectID)
	}
	shares := h.sharesFor(projDiehl)
	if len(shares) != 1 || len(h.sim.RBACPolicies()) != 1 {
		t.Fatalf("RBAC policies %v, want exactly one share with %s", h.sim.RBACPolicies(), projDiehl)
	}
	p, ok := h.sim.Port(l.Status.LegPortID)
	if !ok || p.ProjectID != projDiehl || p.DeviceID != h.router(diehlRouter).ID || p.FixedIPs[0].IPAddress != l.Status.TransitIP {
		t.Fatalf("leg %+v: want a port of %s attached to %s at %s", p, projDiehl, diehlRouter, l.Status.TransitIP)
	}
	if !hasRoute(h.opRouter(), diehlCIDR, l.Status.TransitIP) {
		t.Fatalf("gateway route missing: %v", h.opRouter().Routes)
	}

	t.Run("client cached until the Secret changes", func(t *testing.T) {
		before := h.builds.Load()
		h.sim.ResetCounters()
		for range 3 {
			if _, err := h.reconcile("diehl01"); err != nil {
				t.Fatal(err)
			}
		}
		if h.builds.Load() != before || h.sim.Counters().Tokens != 0 {
			t.Fatalf("converged reconciles rebuilt the client (%d builds, %d tokens)", h.builds.Load()-before, h.sim.Counters().Tokens)
		}
		if h.sim.Counters().Writes != 0 {
			t.Fatalf("converged cross-tenant reconciles wrote %d times", h.sim.Counters().Writes)
		}
		h.secret("diehl01", "diehl-rotated", nil) // rotation in place
		h.untilReady("diehl01")
		if h.builds.Load() != before+1 {
			t.Fatalf("%d builds after rotation, want exactly one more", h.builds.Load()-before)
		}
	})

	t.Run("share re-checked every reconcile", func(t *testing.T) {
		if err := h.sim.DeleteRBACPolicy(shares[0].ID); err != nil {
			t.Fatal(err)
		}
		h.untilReady("diehl01")
		if len(h.sharesFor(projDiehl)) != 1 {
			t.Fatal("share not restored")
		}
	})

	t.Run("unbind order; share kept", func(t *testing.T) {
		l := h.get("diehl01")
		h.sim.ResetCounters()
		h.delete("diehl01")
		h.until("diehl01", "gone", nil)
		var first string
		for _, rec := range h.sim.RequestLog() {
			if rec.Method != "GET" && !strings.Contains(rec.Path, "/auth/") {
				first = rec.Path
				if rec.ProjectID != projOperator {
					t.Fatalf("first write %s was not the operator's", rec.Path)
				}
				break
			}
		}
		if !strings.Contains(first, h.opRouter().ID+"/remove_extraroutes") {
			t.Fatalf("first write %q, want the gateway route removal", first)
		}
		if _, ok := h.sim.Port(l.Status.LegPortID); ok || hasRoute(h.opRouter(), diehlCIDR, l.Status.TransitIP) {
			t.Fatal("deletion left the leg or the route")
		}
		if len(h.sharesFor(projDiehl)) != 1 {
			t.Fatal("the RBAC share was removed on delete")
		}
	})
}

// TenantIsolationAttested: without the annotation exactly "none", zero OpenStack calls,
// not even the credential.
func TestCrossTenantNotAttested(t *testing.T) {
	h := newHarness(t)
	h.secret("na1", "diehl", nil)
	h.secret("na2", "diehl", nil)
	h.sim.ResetCounters()
	h.newLink("na1", diehlRouter, diehlCIDR, crossTenant(projDiehl), func(l *v1alpha1.ClusterLink) { delete(l.Annotations, v1alpha1.AnnotationCustomerAPIAccess) })
	h.newLink("na2", diehlRouter, "10.236.0.0/16", crossTenant(projDiehl), func(l *v1alpha1.ClusterLink) { l.Annotations[v1alpha1.AnnotationCustomerAPIAccess] = "None" })
	for _, n := range []string{"na1", "na2"} {
		l := h.untilCond(n, v1alpha1.ConditionTenantIsolationAttested, v1alpha1.ReasonNotAttested)
		expectCond(t, l, v1alpha1.ConditionTenantIsolationAttested, metav1.ConditionFalse, v1alpha1.ReasonNotAttested, "a cross-tenant link needs the annotation "+v1alpha1.AnnotationCustomerAPIAccess)
		expectCond(t, l, v1alpha1.ConditionReady, metav1.ConditionFalse, v1alpha1.ReasonNotAttested, "")
	}
	if n := h.sim.Counters().Total(); n != 0 || h.builds.Load() != 0 || h.reader.secretGets.Load() != 0 {
		t.Fatalf("unattested links made %d OpenStack calls, %d client builds, %d Secret reads", n, h.builds.Load(), h.reader.secretGets.Load())
	}
	// Attesting later lets the link proceed.
	h.update("na1", func(l *v1alpha1.ClusterLink) {
		l.Annotations = map[string]string{v1alpha1.AnnotationCustomerAPIAccess: "none"}
	})
	h.untilReady("na1")
}

// The credential-resolution reasons that are checked before, or instead of,
// authenticating: each is CredentialsResolved=False with a 15s requeue and nothing
// shared, created or attached.
func TestCrossTenantCredentialRefusals(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name       string
		setup      func(name string) linkOpt
		reason     string
		msg        string
		noSecret   bool // the Secret must not even be read
		noOpenStak bool
	}{
		{"ns", func(n string) linkOpt {
			h.secret(n, "diehl", nil)
			return func(l *v1alpha1.ClusterLink) { l.Spec.CredentialsSecretRef.Namespace = "default" }
		}, v1alpha1.ReasonSecretNamespaceNotAllowed, "secret default/clusterlink-ns: namespace \"default\" is not the operator's credentials namespace", true, true},
		{"name", func(n string) linkOpt {
			h.secret("diehl02", "diehl", nil)
			return func(l *v1alpha1.ClusterLink) { l.Spec.CredentialsSecretRef.Name = "clusterlink-diehl02" }
		}, v1alpha1.ReasonSecretNameNotAllowed, "secret " + credNS + "/clusterlink-diehl02: a ClusterLink may only use the Secret written for it", true, true},
		{"missing", func(n string) linkOpt { return nil }, v1alpha1.ReasonSecretNotFound, "secret " + credNS + "/clusterlink-missing: not found", false, true},
		{"nokey", func(n string) linkOpt {
			h.secret(n, "diehl", map[string]string{openstack.EnvAppCredentialSecret: ""})
			return nil
		}, v1alpha1.ReasonCredentialsInvalid, "secret " + credNS + "/clusterlink-nokey: missing required key(s) OS_APPLICATION_CREDENTIAL_SECRET", false, true},
		{"userpass", func(n string) linkOpt {
			h.secret(n, "", map[string]string{openstack.EnvUsername: "diehl", openstack.EnvPassword: "ZZSECRET-password-9e1"})
			secretValues = append(secretValues, "ZZSECRET-password-9e1")
			return nil
		}, v1alpha1.ReasonCredentialsInvalid, "secret " + credNS + "/clusterlink-userpass: missing required key(s) OS_APPLICATION_CREDENTIAL_ID, OS_APPLICATION_CREDENTIAL_SECRET", false, true},
		{"authurl", func(n string) linkOpt {
			h.secret(n, "diehl", map[string]string{openstack.EnvAuthURL: "https://keystone.attacker.example/v3"})
			return nil
		}, v1alpha1.ReasonCredentialsInvalid, "secret " + credNS + "/clusterlink-authurl: OS_AUTH_URL is not the operator's own Keystone endpoint", false, true},
		{"region", func(n string) linkOpt {
			h.secret(n, "diehl", map[string]string{openstack.EnvRegionName: "RegionTwo"})
			return nil
		}, v1alpha1.ReasonCredentialsInvalid, "secret " + credNS + "/clusterlink-region: OS_REGION_NAME is not the operator's own region", false, true},
		{"badsecret", func(n string) linkOpt {
			h.secret(n, "diehl", map[string]string{openstack.EnvAppCredentialSecret: "ZZSECRET-wrong-5a7"})
			secretValues = append(secretValues, "ZZSECRET-wrong-5a7")
			return nil
		}, v1alpha1.ReasonAuthFailed, "secret " + credNS + "/clusterlink-badsecret: authentication failed: ", false, false},
		{"noroles", func(n string) linkOpt {
			h.secret(n, "diehl-noroles", nil)
			return nil
		}, v1alpha1.ReasonAuthFailed, "secret " + credNS + "/clusterlink-noroles: the token carries no roles", false, false},
		{"opspec", func(n string) linkOpt {
			h.secret(n, "diehl", nil)
			return func(l *v1alpha1.ClusterLink) { l.Spec.CustomerProjectID = projOperator }
		}, v1alpha1.ReasonCredentialsAreOperatorProject, "secret " + credNS + "/clusterlink-opspec: spec.customerProjectID " + projOperator + " is the operator's own project", true, true},
		{"opsecret", func(n string) linkOpt {
			h.secret(n, "operator-as-customer", nil)
			return nil
		}, v1alpha1.ReasonCredentialsAreOperatorProject, "secret " + credNS + "/clusterlink-opsecret: authenticates into the operator's own project " + projOperator, false, false},
	}
	for _, c := range cases {
		t.Run(c.reason+"/"+c.name, func(t *testing.T) {
			opts := []linkOpt{crossTenant(projDiehl)}
			if o := c.setup(c.name); o != nil {
				opts = append(opts, o)
			}
			h.sim.ResetCounters()
			gets := h.reader.secretGets.Load()
			h.newLink(c.name, "shoot--diehl--diehl02", freshCIDR(), opts...)
			res, _ := h.reconcile(c.name)
			l := h.get(c.name)
			expectCond(t, l, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, c.reason, c.msg)
			if res.RequeueAfter != CredentialRequeue {
				t.Errorf("requeue %v, want %v", res.RequeueAfter, CredentialRequeue)
			}
			if c.noSecret && h.reader.secretGets.Load() != gets {
				t.Errorf("the Secret was read before the refusal")
			}
			cnt := h.sim.Counters()
			if c.noOpenStak && cnt.Total() != 0 {
				t.Errorf("%d OpenStack calls before the refusal: %v", cnt.Total(), cnt.ByRoute)
			}
			if cnt.Writes != 0 || len(h.sim.RBACPolicies()) != 0 || len(h.linkPorts(l)) != 0 {
				t.Errorf("a refused credential changed OpenStack: %d writes", cnt.Writes)
			}
		})
	}
}

// CredentialsPrivileged: admin, service or advsvc in any case is refused, the same
// Secret version is not authenticated again, the resync interval applies, and an
// updated Secret is picked up.
func TestCrossTenantCredentialsPrivileged(t *testing.T) {
	h := newHarness(t)
	for _, c := range []struct{ cred, role string }{{"diehl-admin", "Admin"}, {"diehl-service", "service"}, {"diehl-advsvc", "ADVSVC"}} {
		t.Run(c.role, func(t *testing.T) {
			name := "priv-" + strings.ToLower(c.role)
			shares := len(h.sim.RBACPolicies())
			h.secret(name, c.cred, nil)
			h.newLink(name, "shoot--diehl--diehl02", freshCIDR(), crossTenant(projDiehl))
			res, _ := h.reconcile(name)
			l := h.get(name)
			expectCond(t, l, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, v1alpha1.ReasonCredentialsPrivileged, secretPrefix(name)+"the credential's token carries the privileged role(s) "+c.role)
			if res.RequeueAfter != h.cfg.ResyncInterval {
				t.Fatalf("requeue %v, want the resync interval", res.RequeueAfter)
			}
			builds := h.builds.Load()
			h.sim.ResetCounters()
			if _, err := h.reconcile(name); err != nil {
				t.Fatal(err)
			}
			if h.builds.Load() != builds || h.sim.Counters().Total() != 0 {
				t.Fatalf("the refused Secret version was authenticated again (%d builds, %v)", h.builds.Load()-builds, h.sim.Counters().ByRoute)
			}
			if len(h.sim.RBACPolicies()) != shares {
				t.Fatal("a privileged credential got the network shared")
			}
			h.secret(name, "diehl", nil)
			h.untilCond(name, v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonResolved)
			h.delete(name)
			h.until(name, "gone", nil)
		})
	}
}

// CredentialsProjectMismatch names both projects; nothing shared, created or attached;
// not re-authenticated for the same Secret version.
func TestCrossTenantProjectMismatch(t *testing.T) {
	h := newHarness(t)
	h.secret("mismatch", "other", nil)
	h.newLink("mismatch", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	h.sim.ResetCounters()
	res, _ := h.reconcile("mismatch")
	l := h.get("mismatch")
	expectCond(t, l, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, v1alpha1.ReasonCredentialsProjectMismatch,
		secretPrefix("mismatch")+"the credential authenticates into project "+projOther+", but spec.customerProjectID is "+projDiehl)
	if res.RequeueAfter != h.cfg.ResyncInterval {
		t.Fatalf("requeue %v", res.RequeueAfter)
	}
	if c := h.sim.Counters(); c.Writes != 0 || len(h.sim.RBACPolicies()) != 0 || len(h.linkPorts(l)) != 0 {
		t.Fatalf("a mismatched credential changed OpenStack: %+v", c)
	}
	h.sim.ResetCounters()
	_, _ = h.reconcile("mismatch")
	if n := h.sim.Counters().Total(); n != 0 {
		t.Fatalf("the refused version was tried again: %d calls", n)
	}
}

// CredentialsProjectChanged: a credential of another project than the one the leg was
// built in (reachable for objects that predate spec.customerProjectID).
func TestCrossTenantProjectChanged(t *testing.T) {
	h := newHarness(t)
	h.secret("changed", "diehl", nil)
	h.newLink("changed", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	l := h.untilReady("changed")
	l.Status.CustomerProjectID = "legacy0000000000000000000000000"
	if err := env.Client.Status().Update(h.ctx, l); err != nil {
		t.Fatal(err)
	}
	h.sim.ResetCounters()
	res, _ := h.reconcile("changed")
	l = h.get("changed")
	expectCond(t, l, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, v1alpha1.ReasonCredentialsProjectChanged,
		secretPrefix("changed")+"the credential authenticates into project "+projDiehl+", but this link's leg was built in project \"legacy")
	if res.RequeueAfter != h.cfg.ResyncInterval || h.sim.Counters().Writes != 0 {
		t.Fatalf("requeue %v, writes %d", res.RequeueAfter, h.sim.Counters().Writes)
	}
}

// RouterResolveFailed is checked with the customer credential before sharing: no share.
func TestCrossTenantRouterResolveFailedSharesNothing(t *testing.T) {
	h := newHarness(t)
	h.secret("noshare", "diehl", nil)
	// The operator's svc01 router exists, but not in the customer's project.
	h.newLink("noshare", "shoot--services--svc01", diehlCIDR, crossTenant(projDiehl))
	l := h.untilCond("noshare", v1alpha1.ConditionLegAttached, v1alpha1.ReasonRouterResolveFailed)
	expectCond(t, l, v1alpha1.ConditionLegAttached, metav1.ConditionFalse, v1alpha1.ReasonRouterResolveFailed, custPrefix("noshare")+`resolving router "shoot--services--svc01"`)
	if len(h.sim.RBACPolicies()) != 0 || len(h.linkPorts(l)) != 0 {
		t.Fatal("an unresolvable router still got the network shared or a port")
	}
}

// TransitNetworkShared: a refusal or a foreign rule is fine when the customer can see
// the network; otherwise NotShared with the one-time command; other failures have
// their own reasons.
func TestCrossTenantTransitNetworkShared(t *testing.T) {
	rbac := "/network/v2.0/rbac-policies"
	t.Run("409 DuplicateRbacPolicy, visible", func(t *testing.T) {
		h := newHarness(t, func(s *openstacksim.Seed) {
			s.RBACPolicies = append(s.RBACPolicies, openstacksim.SeedRBAC{Network: "vpn-transit", TargetProject: "customer-diehl", Project: "admin"})
		})
		h.secret("dup", "diehl", nil)
		h.newLink("dup", diehlRouter, diehlCIDR, crossTenant(projDiehl))
		l := h.untilReady("dup")
		expectCond(t, l, v1alpha1.ConditionTransitNetworkShared, metav1.ConditionTrue, v1alpha1.ReasonShared, "transit network "+h.transitNetID()+" is visible to project "+projDiehl+" through a rule the operator does not own")
		if len(h.sim.RBACPolicies()) != 1 {
			t.Fatalf("policies %v", h.sim.RBACPolicies())
		}
	})
	t.Run("403, visible", func(t *testing.T) {
		h := newHarness(t, func(s *openstacksim.Seed) {
			s.RBACPolicies = append(s.RBACPolicies, openstacksim.SeedRBAC{Network: "vpn-transit", TargetProject: "customer-diehl", Project: "admin"})
		})
		h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: rbac, Status: 403})
		h.secret("vis", "diehl", nil)
		h.newLink("vis", diehlRouter, diehlCIDR, crossTenant(projDiehl))
		h.untilReady("vis")
	})
	t.Run("403, not visible", func(t *testing.T) {
		h := newHarness(t)
		h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: rbac, Status: 403})
		h.secret("notshared", "diehl", nil)
		h.newLink("notshared", diehlRouter, diehlCIDR, crossTenant(projDiehl))
		res, _ := h.reconcile("notshared")
		l := h.get("notshared")
		c := expectCond(t, l, v1alpha1.ConditionTransitNetworkShared, metav1.ConditionFalse, v1alpha1.ReasonTransitNetworkNotShared, "operator credential: sharing transit network")
		cmd := "openstack network rbac create --type network --action access_as_shared --target-project " + projDiehl + " " + h.transitNetID()
		if !strings.Contains(c.Message, cmd) {
			t.Fatalf("message %q lacks the command %q", c.Message, cmd)
		}
		if res.RequeueAfter != h.cfg.ResyncInterval || len(h.linkPorts(l)) != 0 || l.Status.TransitIP != "" {
			t.Fatalf("requeue %v; a port was made without the share", res.RequeueAfter)
		}
	})
	t.Run("other failure", func(t *testing.T) {
		h := newHarness(t)
		h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: rbac, Status: 400})
		h.secret("sharefail", "diehl", nil)
		h.newLink("sharefail", diehlRouter, diehlCIDR, crossTenant(projDiehl))
		l := h.untilCond("sharefail", v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonEnsureNetworkSharedFailed)
		expectCond(t, l, v1alpha1.ConditionTransitNetworkShared, metav1.ConditionFalse, v1alpha1.ReasonEnsureNetworkSharedFailed, "operator credential: ")
	})
	t.Run("visibility check fails", func(t *testing.T) {
		h := newHarness(t)
		h.sim.Inject(openstacksim.Fault{Method: "POST", PathPattern: rbac, Status: 403})
		// The customer's visibility check fails; the operator's own read of the network
		// (is it shared with every project?) does not.
		h.sim.Inject(openstacksim.Fault{Method: "GET", PathPattern: "/network/v2.0/networks/" + h.transitNetID(), Status: 500, UserAgent: customerUserAgent})
		h.secret("visfail", "diehl", nil)
		h.newLink("visfail", diehlRouter, diehlCIDR, crossTenant(projDiehl))
		l := h.untilCond("visfail", v1alpha1.ConditionTransitNetworkShared, v1alpha1.ReasonNetworkVisibilityCheckFailed)
		expectCond(t, l, v1alpha1.ConditionTransitNetworkShared, metav1.ConditionFalse, v1alpha1.ReasonNetworkVisibilityCheckFailed, custPrefix("visfail"))
	})
}

// One ClusterLink per customer router: the second gets its own port but Neutron
// refuses the attachment, surfaced with the customer credential named.
func TestCrossTenantSecondLinkOnSameRouter(t *testing.T) {
	h := newHarness(t)
	h.secret("first", "diehl", nil)
	h.secret("second", "diehl", nil)
	h.newLink("first", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	h.untilReady("first")
	h.newLink("second", diehlRouter, "10.236.0.0/16", crossTenant(projDiehl))
	l := h.untilCond("second", v1alpha1.ConditionLegAttached, v1alpha1.ReasonEnsureRouterHasPortFailed)
	c := expectCond(t, l, v1alpha1.ConditionLegAttached, metav1.ConditionFalse, v1alpha1.ReasonEnsureRouterHasPortFailed, custPrefix("second")+"attaching leg port ")
	if !strings.Contains(c.Message, "Router already has a port on subnet") {
		t.Fatalf("Neutron's refusal not surfaced: %q", c.Message)
	}
	ps := h.linkPorts(l)
	if len(ps) != 1 || ps[0].DeviceID != "" {
		t.Fatalf("second link's ports %+v: want its own, unattached", ps)
	}
	if hasRoute(h.opRouter(), "10.236.0.0/16", l.Status.TransitIP) {
		t.Fatal("a route to an unattached leg was installed")
	}
	if len(h.sharesFor(projDiehl)) != 1 {
		t.Fatal("both links should share the one RBAC share")
	}
}

// TransitIPMismatch: the leg vanished and came back elsewhere; the route via the old
// address goes at once, the recreated port is deleted, nothing routes to the new one,
// and the link stays terminal.
func TestCrossTenantTransitIPMismatch(t *testing.T) {
	h := newHarness(t)
	h.secret("mm", "diehl", nil)
	h.newLink("mm", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	l := h.untilReady("mm")
	old := l.Status.TransitIP
	if err := h.sim.DeletePort(l.Status.LegPortID); err != nil {
		t.Fatal(err)
	}
	// Another tenant's port takes the freed address.
	if _, err := h.sim.AddPort(openstacksim.Port{NetworkID: h.transitNetID(), ProjectID: projOther, FixedIPs: []openstacksim.FixedIP{{IPAddress: old}}}); err != nil {
		t.Fatal(err)
	}
	l = h.untilCond("mm", v1alpha1.ConditionLegAttached, v1alpha1.ReasonTransitIPMismatch)
	c := expectCond(t, l, v1alpha1.ConditionLegAttached, metav1.ConditionFalse, v1alpha1.ReasonTransitIPMismatch, custPrefix("mm")+"the leg port came back at ")
	if !strings.Contains(c.Message, "instead of status.transitIP "+old) {
		t.Fatalf("message %q", c.Message)
	}
	if hasRoute(h.opRouter(), diehlCIDR, old) || len(h.opRouter().Routes) != 0 {
		t.Fatalf("gateway routes after the mismatch: %v", h.opRouter().Routes)
	}
	if ps := h.linkPorts(l); len(ps) != 0 {
		t.Fatalf("the recreated port survives: %+v", ps)
	}
	expectCond(t, l, v1alpha1.ConditionRouteInstalled, metav1.ConditionFalse, v1alpha1.ReasonEnsureRouteFailed, "operator credential: ")
	h.sim.ResetCounters()
	for range 3 {
		_, _ = h.reconcile("mm")
	}
	if w := h.sim.Counters().Writes; w != 0 || len(h.linkPorts(l)) != 0 {
		t.Fatalf("a terminal mismatch retried: %d writes", w)
	}
}

// A forward-route failure on a cross-tenant link names the operator credential.
func TestCrossTenantOperatorCredentialPrefix(t *testing.T) {
	h := newHarness(t)
	h.sim.Inject(openstacksim.Fault{Method: "PUT", PathPattern: "/network/v2.0/routers/" + h.opRouter().ID + "/add_extraroutes", Status: 400})
	h.secret("opfail", "diehl", nil)
	h.newLink("opfail", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	l := h.untilCond("opfail", v1alpha1.ConditionRouteInstalled, v1alpha1.ReasonEnsureRouteFailed)
	expectCond(t, l, v1alpha1.ConditionRouteInstalled, metav1.ConditionFalse, v1alpha1.ReasonEnsureRouteFailed, "operator credential: add routes")
	expectCond(t, l, v1alpha1.ConditionLegAttached, metav1.ConditionTrue, v1alpha1.ReasonAttached, "")
}

// Unbind: with the customer credential gone, the gateway route is still removed at
// once and the finalizer is held (CredentialsUnavailable) until the Secret is back.
func TestCrossTenantUnbindHeldUntilSecretFixed(t *testing.T) {
	h := newHarness(t)
	customerNS(t, "tenant-ub", projDiehl)
	ipsecGateway(t, "tenant-ub", "gw", true, "100.64.5.0/24", "10.254.0.105")
	h.secret("held", "diehl", nil)
	h.newLink("held", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	l := h.untilReady("held")
	if err := env.Client.Delete(h.ctx, h.secret("held", "diehl", nil)); err != nil {
		t.Fatal(err)
	}
	h.delete("held")
	l = h.untilCond("held", v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonCredentialsUnavailable)
	expectCond(t, l, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, v1alpha1.ReasonCredentialsUnavailable,
		"the customer side cannot be cleaned up, so the finalizer is held: SecretNotFound: "+secretPrefix("held")+"not found")
	if hasRoute(h.opRouter(), diehlCIDR, l.Status.TransitIP) {
		t.Fatal("the gateway route was not removed first")
	}
	if _, ok := h.sim.Port(l.Status.LegPortID); !ok || !hasRoute(h.router(diehlRouter), "100.64.5.0/24", "10.254.0.105") {
		t.Fatal("the customer side was touched without a credential")
	}
	h.secret("held", "diehl", nil)
	h.until("held", "gone", nil)
	if _, ok := h.sim.Port(l.Status.LegPortID); ok || len(h.router(diehlRouter).Routes) != 0 {
		t.Fatal("the customer side was not unwound once the Secret was back")
	}
}

// Unbind with a credential that now scopes another project: refused, held with
// CredentialsProjectMismatch.
func TestCrossTenantUnbindRefusesWrongProject(t *testing.T) {
	h := newHarness(t)
	h.secret("wrongproj", "diehl", nil)
	h.newLink("wrongproj", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	l := h.untilReady("wrongproj")
	h.secret("wrongproj", "other", nil)
	h.delete("wrongproj")
	l = h.untilCond("wrongproj", v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonCredentialsProjectMismatch)
	expectCond(t, l, v1alpha1.ConditionCredentialsResolved, metav1.ConditionFalse, v1alpha1.ReasonCredentialsProjectMismatch, "the customer side cannot be cleaned up, so the finalizer is held: "+secretPrefix("wrongproj"))
	if _, ok := h.sim.Port(l.Status.LegPortID); !ok {
		t.Fatal("the leg was removed with a foreign project's credential")
	}
	for _, rec := range h.sim.RequestLog() {
		if rec.ProjectID == projOther && rec.Method != "GET" && !strings.Contains(rec.Path, "/auth/") {
			t.Fatalf("the other project's credential wrote %s %s", rec.Method, rec.Path)
		}
	}
}

// The abandon annotation releases a held link, touching nothing on the customer side,
// with a Warning Event naming exactly what is left.
func TestCrossTenantAbandon(t *testing.T) {
	h := newHarness(t)
	customerNS(t, "tenant-ab", projDiehl)
	ipsecGateway(t, "tenant-ab", "gw", true, "100.64.6.0/24", "10.254.0.106")
	h.secret("abandon", "diehl", nil)
	h.newLink("abandon", diehlRouter, diehlCIDR, crossTenant(projDiehl))
	l := h.untilReady("abandon")
	if err := env.Client.Delete(h.ctx, h.secret("abandon", "diehl", nil)); err != nil {
		t.Fatal(err)
	}
	h.delete("abandon")
	h.untilCond("abandon", v1alpha1.ConditionCredentialsResolved, v1alpha1.ReasonCredentialsUnavailable)
	h.update("abandon", func(l *v1alpha1.ClusterLink) { l.Annotations[v1alpha1.AnnotationAbandonCustomerResources] = "true" })
	h.until("abandon", "gone", nil)
	evs := h.rec.find("abandon", "CustomerResourcesAbandoned")
	if len(evs) != 1 || evs[0].Type != "Warning" {
		t.Fatalf("abandon events %+v", evs)
	}
	for _, want := range []string{"leg port " + l.Status.LegPortID, "transit IP " + l.Status.TransitIP, "router " + diehlRouter, "100.64.6.0/24 via 10.254.0.106 (IPsecGateway/tenant-ab/gw)", projDiehl} {
		if !strings.Contains(evs[0].Note, want) {
			t.Fatalf("abandon event %q does not name %q", evs[0].Note, want)
		}
	}
	if _, ok := h.sim.Port(l.Status.LegPortID); !ok || !hasRoute(h.router(diehlRouter), "100.64.6.0/24", "10.254.0.106") {
		t.Fatal("abandon touched the customer side")
	}
	if hasRoute(h.opRouter(), diehlCIDR, l.Status.TransitIP) {
		t.Fatal("the gateway route survived")
	}
}
