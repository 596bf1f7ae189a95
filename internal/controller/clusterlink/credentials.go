package clusterlink

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "bnerd.net/vpn-operator/api/v1alpha1"
	"bnerd.net/vpn-operator/internal/openstack"
)

// SecretNamePrefix is the only Secret name a ClusterLink may use: clusterlink-<name>.
const SecretNamePrefix = "clusterlink-"

// PrivilegedRoles are the roles a customer credential must not carry: admin reaches
// every project under legacy policy, service and advsvc skip the per-project filter.
var PrivilegedRoles = []string{"admin", "service", "advsvc"}

// SafeRoles are the roles a customer credential may carry: OpenStack's project-scoped
// member and reader roles and the service-specific roles that grant nothing in Neutron
// (the customer credential is only used against Neutron). A role on neither list is
// refused too: a cloud can make any role privileged in its policy, which no name check
// can see, so only the roles known to be harmless pass. An operator adds the roles its
// cloud's policy keeps harmless with IPSEC_CLUSTERLINK_SAFE_ROLES.
var SafeRoles = []string{
	"member", "_member_", "reader",
	"load-balancer_member", "load-balancer_observer", "load-balancer_admin",
	"creator", "heat_stack_owner", "heat_stack_user", "swiftoperator",
}

// refusal remembers a Secret version the operator refused, so it does not
// authenticate with the same version again.
type refusal struct {
	version string
	reason  string
	message string
}

// credResult is the outcome of resolving a cross-tenant link's customer credential.
// reason is empty on success.
type credResult struct {
	clients *openstack.Clients
	project string
	reason  string
	message string
	requeue time.Duration
	// err is a transient failure worth a backoff rather than a fixed requeue.
	err error
}

func (c credResult) ok() bool { return c.reason == "" }

// secretVersion is the identity the cache and the refusal memory key on.
func secretVersion(s *corev1.Secret) string { return string(s.UID) + "/" + s.ResourceVersion }

// customerCredential walks the checks of the specification in order. Every check that
// can be made without a Secret read comes before the read, and every check that can be
// made without authenticating comes before authentication. Messages name the Secret
// and project IDs only. Each step returns a result that is not ok() to stop.
func (r *Reconciler) customerCredential(ctx context.Context, lc *linkCtx) credResult {
	c := &credCheck{r: r, link: lc.link, name: "secret " + lc.secret}
	if res := c.checkRef(); !res.ok() {
		return res
	}
	secret, res := c.readSecret(ctx)
	if !res.ok() {
		return res
	}
	c.version = secretVersion(secret)
	if res := c.refusedBefore(); !res.ok() {
		return res
	}
	cred, res := c.credentialOf(secret)
	if !res.ok() {
		return res
	}
	clients, info, res := c.authenticate(ctx, cred)
	if !res.ok() {
		return res
	}
	return c.checkToken(ctx, clients, info)
}

// credCheck is one walk of customerCredential's checks for one link.
type credCheck struct {
	r    *Reconciler
	link *v1alpha1.ClusterLink
	// name is "secret <namespace>/<name>", for messages.
	name string
	// version is the Secret's, once read (secretVersion).
	version string
}

// fixed is a refusal a change of the Secret or the link fixes, retried at
// CredentialRequeue.
func (c *credCheck) fixed(reason, format string, args ...any) credResult {
	return credResult{reason: reason, message: c.name + ": " + fmt.Sprintf(format, args...), requeue: CredentialRequeue}
}

// refuse is a refusal remembered for this Secret version: the same version is not
// tried again (no new authentication) until the Secret changes.
func (c *credCheck) refuse(reason, msg string) credResult {
	r, uid := c.r, c.link.UID
	r.cache.Forget(string(uid))
	r.mu.Lock()
	r.refusals[uid] = refusal{version: c.version, reason: reason, message: msg}
	delete(r.verified, uid)
	r.mu.Unlock()
	return credResult{reason: reason, message: msg, requeue: r.Config.ResyncInterval}
}

// checkRef: what the link's reference and project say, before any read.
func (c *credCheck) checkRef() credResult {
	r, link := c.r, c.link
	ref := link.Spec.CredentialsSecretRef
	if ref.Namespace != r.Config.ClusterLinkCredentialsNamespace {
		return c.fixed(v1alpha1.ReasonSecretNamespaceNotAllowed,
			"namespace %q is not the operator's credentials namespace %q; customer credentials are read only from there",
			ref.Namespace, r.Config.ClusterLinkCredentialsNamespace)
	}
	if want := SecretNamePrefix + link.Name; ref.Name != want {
		return c.fixed(v1alpha1.ReasonSecretNameNotAllowed,
			"a ClusterLink may only use the Secret written for it, %s/%s; the Secret was not read", ref.Namespace, want)
	}
	if link.Spec.CustomerProjectID != "" && link.Spec.CustomerProjectID == r.OperatorProjectID {
		return c.fixed(v1alpha1.ReasonCredentialsAreOperatorProject,
			"spec.customerProjectID %s is the operator's own project; a cross-tenant link must name the customer's project", link.Spec.CustomerProjectID)
	}
	return credResult{}
}

// readSecret follows the link's one Secret and reads it past the cache.
func (c *credCheck) readSecret(ctx context.Context) (*corev1.Secret, credResult) {
	r, ref := c.r, c.link.Spec.CredentialsSecretRef
	// Follow this one Secret, metadata only: updating it retries at once, not at the
	// resync, and the operator still caches no Secret.
	if r.secrets != nil {
		r.secrets.Set(secretOwner(c.link.Name), []types.NamespacedName{{Namespace: ref.Namespace, Name: ref.Name}}, nil)
	}
	secret := &corev1.Secret{}
	if err := r.reader.Get(ctx, types.NamespacedName{Namespace: ref.Namespace, Name: ref.Name}, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, c.fixed(v1alpha1.ReasonSecretNotFound, "not found")
		}
		return nil, credResult{reason: v1alpha1.ReasonSecretNotFound, message: c.name + ": cannot be read: " + apiErrText(err), requeue: CredentialRequeue, err: err}
	}
	return secret, credResult{}
}

// refusedBefore answers with the remembered refusal of this Secret version, if any; a
// new version forgets it.
func (c *credCheck) refusedBefore() credResult {
	r, uid := c.r, c.link.UID
	r.mu.Lock()
	ref0, refused := r.refusals[uid]
	if refused && ref0.version != c.version {
		delete(r.refusals, uid)
		refused = false
	}
	r.mu.Unlock()
	if refused {
		return credResult{reason: ref0.reason, message: ref0.message, requeue: r.Config.ResyncInterval}
	}
	return credResult{}
}

// credentialOf checks the Secret's keys and builds the credential, with the operator's
// own endpoint, region and interface whatever the Secret says.
func (c *credCheck) credentialOf(secret *corev1.Secret) (openstack.Credential, credResult) {
	r := c.r
	get := func(k string) string { return strings.TrimSpace(string(secret.Data[k])) }
	var missing []string
	for _, k := range []string{openstack.EnvAppCredentialID, openstack.EnvAppCredentialSecret} {
		if get(k) == "" {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return openstack.Credential{}, c.fixed(v1alpha1.ReasonCredentialsInvalid, "missing required key(s) %s (an application credential is required)", strings.Join(missing, ", "))
	}
	// Values of the Secret are compared, never quoted: the point of the check is that
	// an attacker-chosen endpoint is never contacted, and naming it helps no one.
	if v := get(openstack.EnvAuthURL); v != "" && strings.TrimRight(v, "/") != strings.TrimRight(r.AuthURL, "/") {
		return openstack.Credential{}, c.fixed(v1alpha1.ReasonCredentialsInvalid, "%s is not the operator's own Keystone endpoint %s", openstack.EnvAuthURL, r.AuthURL)
	}
	if v := get(openstack.EnvRegionName); v != "" && v != r.Region {
		return openstack.Credential{}, c.fixed(v1alpha1.ReasonCredentialsInvalid, "%s is not the operator's own region %q", openstack.EnvRegionName, r.Region)
	}
	// Endpoint, region and endpoint type are the operator's, whatever the Secret says:
	// an OS_INTERFACE in it (internal, admin) is ignored, so a customer cannot steer the
	// operator to endpoints of the catalog it does not use itself.
	return openstack.Credential{
		AuthURL:             r.AuthURL,
		Region:              r.Region,
		Interface:           r.Interface,
		AppCredentialID:     get(openstack.EnvAppCredentialID),
		AppCredentialSecret: get(openstack.EnvAppCredentialSecret),
	}, credResult{}
}

// authenticate gets the link's clients (cached per Secret version) and its token's
// description.
func (c *credCheck) authenticate(ctx context.Context, cred openstack.Credential) (*openstack.Clients, *openstack.TokenInfo, credResult) {
	r, uid := c.r, string(c.link.UID)
	clients, err := r.cache.Get(ctx, uid, c.version, cred)
	if err != nil {
		res := c.fixed(v1alpha1.ReasonAuthFailed, "authentication failed: %s", err.Error())
		if openstack.IsTransient(err) {
			res.err = err
		}
		return nil, nil, res
	}
	info, err := clients.Identity.TokenInfo(ctx)
	if err != nil {
		r.cache.Forget(uid)
		return nil, nil, c.fixed(v1alpha1.ReasonAuthFailed, "reading the token: %s", err.Error())
	}
	return clients, info, credResult{}
}

// checkToken: the token's roles (once per Secret version: an application credential's
// roles are fixed at its creation) and its project.
func (c *credCheck) checkToken(ctx context.Context, clients *openstack.Clients, info *openstack.TokenInfo) credResult {
	r, link, name := c.r, c.link, c.name
	r.mu.Lock()
	checked := r.verified[link.UID] == c.version
	r.mu.Unlock()
	if !checked {
		if len(info.Roles) == 0 {
			r.cache.Forget(string(link.UID))
			return c.fixed(v1alpha1.ReasonAuthFailed, "the token carries no roles, so its privilege cannot be checked; use a member-scoped application credential")
		}
		if bad := privileged(info.Roles); len(bad) > 0 {
			return c.refuse(v1alpha1.ReasonCredentialsPrivileged, fmt.Sprintf(
				"%s: the credential's token carries the privileged role(s) %s; use a member-scoped application credential (update the Secret to retry)",
				name, strings.Join(bad, ", ")))
		}
		if unknown := r.unknownRoles(info.Roles); len(unknown) > 0 {
			return c.refuse(v1alpha1.ReasonCredentialsPrivileged, fmt.Sprintf(
				"%s: the credential's token carries the role(s) %s, which the operator does not know to be harmless; use an application credential with member roles only, or, once the cloud's policy is checked, add them to IPSEC_CLUSTERLINK_SAFE_ROLES (update the Secret to retry)",
				name, strings.Join(unknown, ", ")))
		}
	}
	if info.ProjectID == r.OperatorProjectID {
		r.cache.Forget(string(link.UID))
		return c.fixed(v1alpha1.ReasonCredentialsAreOperatorProject, "authenticates into the operator's own project %s; a cross-tenant link needs the customer's credential", info.ProjectID)
	}
	if want := link.Spec.CustomerProjectID; want != "" && info.ProjectID != want {
		return c.refuse(v1alpha1.ReasonCredentialsProjectMismatch, fmt.Sprintf(
			"%s: the credential authenticates into project %s, but spec.customerProjectID is %s; nothing was shared, created or attached (update the Secret to retry)",
			name, info.ProjectID, want))
	}
	if !checked {
		if res := c.checkEnoughRoles(ctx, clients, info); !res.ok() {
			return res
		}
	}
	r.mu.Lock()
	r.verified[link.UID] = c.version
	r.mu.Unlock()
	return credResult{clients: clients, project: info.ProjectID}
}

// checkEnoughRoles: member to write, and reader where the cloud's policy hides a
// project's objects without it (found by looking at the project's own default security
// group). Checked once per Secret version, like the roles, and only once the project is
// known to be the right one.
func (c *credCheck) checkEnoughRoles(ctx context.Context, clients *openstack.Clients, info *openstack.TokenInfo) credResult {
	var probe error
	if openstack.NeedsProbe(info.Roles) {
		probe = openstack.ProbeOwnProject(ctx, clients.Networking, info.ProjectID)
	}
	if _, err := openstack.CheckRoles(info.Roles, probe); err != nil {
		if !errors.Is(err, openstack.ErrMissingRole) {
			c.r.cache.Forget(string(c.link.UID))
			res := c.fixed(v1alpha1.ReasonAuthFailed, "checking the credential's roles: %s", err.Error())
			res.err = err
			return res
		}
		return c.refuse(v1alpha1.ReasonCredentialsRoleMissing, fmt.Sprintf("%s: %s (update the Secret to retry)", c.name, err.Error()))
	}
	return credResult{}
}

// privileged returns the roles that make a credential too powerful, in any case;
// roles that only contain such a word (load-balancer_admin) are fine.
func privileged(roles []string) []string {
	var out []string
	for _, role := range roles {
		if slices.ContainsFunc(PrivilegedRoles, func(p string) bool { return strings.EqualFold(p, role) }) {
			out = append(out, role)
		}
	}
	return out
}

// unknownRoles returns the roles on neither list (SafeRoles and the operator's own
// additions), in any case.
func (r *Reconciler) unknownRoles(roles []string) []string {
	safe := append(slices.Clone(SafeRoles), r.Config.ClusterLinkSafeRoles...)
	var out []string
	for _, role := range roles {
		if !slices.ContainsFunc(safe, func(s string) bool { return strings.EqualFold(s, role) }) {
			out = append(out, role)
		}
	}
	return out
}

func apiErrText(err error) string {
	if se, ok := err.(apierrors.APIStatus); ok {
		return string(se.Status().Reason) + ": " + se.Status().Message
	}
	return err.Error()
}

func secretOwner(link string) string { return "ClusterLink/" + link }

// forgetLink drops everything remembered about a link.
func (r *Reconciler) forgetLink(uid types.UID) {
	r.cache.Forget(string(uid))
	r.claims.Release(string(uid))
	r.mu.Lock()
	delete(r.refusals, uid)
	delete(r.verified, uid)
	delete(r.aggregateRouted, uid)
	r.mu.Unlock()
}
