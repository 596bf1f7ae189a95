package main

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"bnerd.net/vpn-operator/internal/testinfra/testenv"
)

// reviewedClusterRole is the operator's ClusterRole as reviewed for least privilege
// (docs/security.md explains each line). A change to the controllers' RBAC markers
// changes config/rbac/role.yaml and fails this test until the list here is changed
// with it: every new verb is a reviewed decision.
var reviewedClusterRole = []string{
	// The gateway pod's ConfigMap and ServiceAccount: created and kept converged.
	`"" configmaps,serviceaccounts create,get,list,update,watch`,
	// The health controllers read the gateway pods' Events.
	`"" events list`,
	// Namespaces: their labels say which ClusterLinks serve a gateway. Nodes: placement.
	`"" namespaces,nodes get,list,watch`,
	// Pods: the health controllers watch gateway pods (the cache holds only those); a
	// gateway pod stranded on a lost node is deleted so its replacement can start.
	`"" pods delete,get,list,watch`,
	// The operator binds new gateway pods (it is their scheduler) once the pod before
	// them has left the node, after reading the ReplicaSet that owns the pod.
	`"" pods/binding create`,
	// Secrets: get/list/watch because Kubernetes lets the operator create the gateway
	// pod's Role (get/list/watch on the Secrets its tunnels name) only if it holds them;
	// used by name only (no cluster-wide list or watch: the audit test). create/update:
	// a WireGuard gateway's key Secret, the only Secret the operator writes. delete: that
	// key Secret when the gateway stops using WireGuard, and the Secret of rendered keys
	// earlier releases wrote.
	`"" secrets create,delete,get,list,update,watch`,
	`apps deployments create,get,list,update,watch`,
	`apps replicasets get`,
	// The metrics filter (--metrics-secure) asks the API server who a scraper is and
	// whether it may get /metrics.
	`authentication.k8s.io tokenreviews create`,
	`authorization.k8s.io subjectaccessreviews create`,
	// The gateways' liveness Leases: created (and removed when the detection is turned
	// off) by the operator, watched to time a node failure from the failure. update
	// only because the gateway pod's Role grants its status agent update on its own
	// Lease, and Kubernetes lets the operator create that Role only then; the operator
	// itself writes only the Leases it labelled and owns.
	`coordination.k8s.io leases create,delete,get,list,update,watch`,
	`events.k8s.io events create,patch`,
	// Gateways and ClusterLinks: the finalizer goes on and off by a merge patch guarded
	// by the resourceVersion, never by update (the object's spec is never sent back).
	`ipsec.bnerd.net clusterlinks,ipsecgateways,vpngateways get,list,patch,watch`,
	// update on finalizers: the owner references the operator sets block the owner's
	// deletion, which the OwnerReferencesPermissionEnforcement admission allows only then.
	`ipsec.bnerd.net clusterlinks/finalizers,ipsecgateways/finalizers,vpngateways/finalizers update`,
	// Status is written by server-side apply only (a patch), never updated. get on a
	// gateway's status: only because the gateway pod's Role grants it (the agent reads
	// its status), and Kubernetes lets the operator create that Role only then.
	`ipsec.bnerd.net clusterlinks/status patch`,
	`ipsec.bnerd.net ipsecgateways/status,vpngateways/status get,patch`,
	// VPNTenantPolicies: read (the gateways' limits and ranges), their status written
	// by update (usage, overlap); the policies themselves are the platform admins' to write.
	`ipsec.bnerd.net vpntenantpolicies get,list,watch`,
	`ipsec.bnerd.net vpntenantpolicies/status update`,
	`k8s.cni.cncf.io network-attachment-definitions create,get,list,update,watch`,
	// A NetworkPolicy is deleted when the operator's switch turns it off.
	`networking.k8s.io networkpolicies create,delete,get,list,update,watch`,
	// A RoleBinding is replaced when its roleRef changes (roleRef is immutable).
	`rbac.authorization.k8s.io rolebindings create,delete,get,list,update,watch`,
	`rbac.authorization.k8s.io roles create,get,list,update,watch`,
}

func TestClusterRoleIsTheReviewedOne(t *testing.T) {
	for _, file := range []string{
		filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"),
		filepath.Join(testenv.RepoRoot(), "charts", "bnerd-vpn-operator", "files", "role.yaml"),
	} {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var role rbacv1.ClusterRole
		if err := yaml.Unmarshal(data, &role); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range role.Rules {
			groups := strings.Join(r.APIGroups, ",")
			if groups == "" {
				groups = `""`
			}
			if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
				t.Errorf("%s: unexpected rule %+v", file, r)
			}
			verbs := append([]string(nil), r.Verbs...)
			sort.Strings(verbs)
			got = append(got, perResource(groups+" "+strings.Join(r.Resources, ",")+" "+strings.Join(verbs, ","))...)
		}
		sort.Strings(got)
		var want []string
		for _, r := range reviewedClusterRole {
			want = append(want, perResource(r)...)
		}
		sort.Strings(want)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s is not the reviewed ClusterRole (review the change, then update reviewedClusterRole and docs/security.md):\n--- generated\n%s\n--- reviewed\n%s",
				file, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// perResource splits "<groups> <res1,res2> <verbs>" into one line per resource, so the
// comparison does not depend on how controller-gen groups resources with equal verbs.
func perResource(rule string) []string {
	f := strings.Fields(rule)
	var out []string
	for _, r := range strings.Split(f[1], ",") {
		out = append(out, f[0]+" "+r+" "+f[2])
	}
	return out
}
