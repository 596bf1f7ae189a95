package openstacksim

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// apiError is a refusal in service-neutral form; the HTTP layer renders it
// in Neutron's or Nova's error shape.
type apiError struct {
	status int
	typ    string // Neutron exception name
	msg    string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.status, e.typ, e.msg) }

func errf(status int, typ, format string, args ...any) *apiError {
	return &apiError{status: status, typ: typ, msg: fmt.Sprintf(format, args...)}
}

type userRec struct {
	User
	password string
}

type appCredRec struct {
	AppCredential
	secret string
}

// set is a string set; the indexes map a key to the IDs holding it.
type set map[string]struct{}

type index map[string]set

func (x index) add(key, id string) {
	s := x[key]
	if s == nil {
		s = set{}
		x[key] = s
	}
	s[id] = struct{}{}
}

func (x index) remove(key, id string) {
	if s := x[key]; s != nil {
		delete(s, id)
		if len(s) == 0 {
			delete(x, key)
		}
	}
}

// state is everything the simulator knows. One RWMutex guards it all: reads
// run in parallel, writes (including the extraroute-atomic calls) serialize,
// which is the atomicity Neutron promises.
type state struct {
	mu sync.RWMutex

	region           string
	maxRoutes        int
	pageSize         int // Neutron's pagination_max_limit (SetPageSize)
	adminOnlyFIPAddr bool
	extensions       []string
	legacyPolicy     bool
	secureRBAC       bool
	impliedRoles     bool
	quotas           map[string]map[string]int // project -> resource -> limit

	projects map[string]*Project
	users    map[string]*userRec
	appCreds map[string]*appCredRec

	networks map[string]*Network
	subnets  map[string]*Subnet
	pools    map[string]*ipPool // by subnet ID
	ports    map[string]*Port
	sgs      map[string]*SecurityGroup
	sgRules  map[string]string // rule ID -> SG ID
	fips     map[string]*FloatingIP
	routers  map[string]*Router
	rbac     map[string]*RBACPolicy
	servers  map[string]*Instance

	// Port indexes keep filtered lists cheap with many ports.
	portsByTag     index
	portsByDevice  index
	portsByIP      index
	portsByNetwork index
	portsByProject index
	portsBySubnet  index

	macs      set
	novaPorts set               // ports Nova created (net_id attach); Nova deletes them on detach
	defaultSG map[string]string // project -> its "default" security group
	seq       map[string]uint64 // creation order, for stable listings
	nextSeq   uint64
}

func newState() *state {
	return &state{
		projects: map[string]*Project{}, users: map[string]*userRec{}, appCreds: map[string]*appCredRec{},
		networks: map[string]*Network{}, subnets: map[string]*Subnet{}, pools: map[string]*ipPool{},
		ports: map[string]*Port{}, sgs: map[string]*SecurityGroup{}, sgRules: map[string]string{},
		fips: map[string]*FloatingIP{}, routers: map[string]*Router{}, rbac: map[string]*RBACPolicy{},
		servers:    map[string]*Instance{},
		portsByTag: index{}, portsByDevice: index{}, portsByIP: index{}, portsByNetwork: index{},
		portsByProject: index{}, portsBySubnet: index{},
		macs: set{}, novaPorts: set{}, defaultSG: map[string]string{}, seq: map[string]uint64{},
	}
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b[:])
}

// seedID derives a stable UUID (version 5 layout) from kind and name.
func seedID(kind, name string) string {
	h := sha1.Sum([]byte("bnerd-openstack-sim/" + kind + "/" + name))
	b := h[:16]
	b[6] = b[6]&0x0f | 0x50
	b[8] = b[8]&0x3f | 0x80
	return formatUUID(b)
}

func formatUUID(b []byte) string {
	h := hex.EncodeToString(b)
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}

func randomSecret() string {
	var b [24]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func now() time.Time { return time.Now().UTC().Truncate(time.Second) }

func (st *state) order(id string) {
	st.nextSeq++
	st.seq[id] = st.nextSeq
}

func (st *state) sortIDs(ids []string) {
	sort.Slice(ids, func(i, j int) bool { return st.seq[ids[i]] < st.seq[ids[j]] })
}

func (st *state) newMAC() string {
	for {
		var b [3]byte
		_, _ = rand.Read(b[:])
		m := fmt.Sprintf("fa:16:3e:%02x:%02x:%02x", b[0], b[1], b[2])
		if _, ok := st.macs[m]; !ok {
			st.macs[m] = struct{}{}
			return m
		}
	}
}

// --- copies: callers outside the lock only ever see copies ---

func cloneStrings(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

func (p *Port) clone() Port {
	c := *p
	c.FixedIPs = slices.Clone(p.FixedIPs)
	if c.FixedIPs == nil {
		c.FixedIPs = []FixedIP{}
	}
	c.SecurityGroups = cloneStrings(p.SecurityGroups)
	c.AllowedAddressPairs = slices.Clone(p.AllowedAddressPairs)
	if c.AllowedAddressPairs == nil {
		c.AllowedAddressPairs = []AddressPair{}
	}
	c.Tags = cloneStrings(p.Tags)
	return c
}

func (n *Network) clone() Network {
	c := *n
	c.Subnets = cloneStrings(n.Subnets)
	c.Tags = cloneStrings(n.Tags)
	return c
}

func (s *Subnet) clone() Subnet {
	c := *s
	c.AllocationPools = slices.Clone(s.AllocationPools)
	c.Tags = cloneStrings(s.Tags)
	return c
}

func (g *SecurityGroup) clone() SecurityGroup {
	c := *g
	c.Rules = slices.Clone(g.Rules)
	if c.Rules == nil {
		c.Rules = []SecurityGroupRule{}
	}
	c.Tags = cloneStrings(g.Tags)
	return c
}

func (f *FloatingIP) clone() FloatingIP {
	c := *f
	c.Tags = cloneStrings(f.Tags)
	return c
}

func (r *Router) clone() Router {
	c := *r
	c.Routes = slices.Clone(r.Routes)
	if c.Routes == nil {
		c.Routes = []Route{}
	}
	c.Tags = cloneStrings(r.Tags)
	if r.GatewayInfo != nil {
		g := *r.GatewayInfo
		g.ExternalFixedIPs = slices.Clone(r.GatewayInfo.ExternalFixedIPs)
		c.GatewayInfo = &g
	}
	return c
}

// --- port indexing ---

func (st *state) indexPort(p *Port) {
	for _, t := range p.Tags {
		st.portsByTag.add(t, p.ID)
	}
	if p.DeviceID != "" {
		st.portsByDevice.add(p.DeviceID, p.ID)
	}
	for _, ip := range p.FixedIPs {
		st.portsByIP.add(ip.IPAddress, p.ID)
		st.portsBySubnet.add(ip.SubnetID, p.ID)
	}
	st.portsByNetwork.add(p.NetworkID, p.ID)
	st.portsByProject.add(p.ProjectID, p.ID)
}

func (st *state) unindexPort(p *Port) {
	for _, t := range p.Tags {
		st.portsByTag.remove(t, p.ID)
	}
	if p.DeviceID != "" {
		st.portsByDevice.remove(p.DeviceID, p.ID)
	}
	for _, ip := range p.FixedIPs {
		st.portsByIP.remove(ip.IPAddress, p.ID)
		st.portsBySubnet.remove(ip.SubnetID, p.ID)
	}
	st.portsByNetwork.remove(p.NetworkID, p.ID)
	st.portsByProject.remove(p.ProjectID, p.ID)
}

// mutatePort applies fn to a port while keeping the indexes right.
func (st *state) mutatePort(p *Port, fn func(p *Port)) {
	st.unindexPort(p)
	fn(p)
	p.RevisionNumber++
	p.UpdatedAt = now()
	st.indexPort(p)
}

// --- visibility, following Neutron's default policy ---

type caller struct {
	projectID string
	userID    string
	admin     bool
	readOnly  bool
	// blind: a read under the secure-RBAC defaults by a token without reader: the
	// project's own objects are hidden (only what is visible to anyone stays: external
	// and shared networks and their subnets).
	blind   bool
	roles   []string
	tokenID string
}

func (st *state) sharedWith(networkID, projectID string) bool {
	for _, r := range st.rbac {
		if r.ObjectID == networkID && r.Action == "access_as_shared" && (r.TargetProject == projectID || r.TargetProject == "*") {
			return true
		}
	}
	return false
}

// networkUsable: the caller may put ports on it.
func (st *state) networkUsable(c *caller, n *Network) bool {
	return c.admin || (!c.blind && n.ProjectID == c.projectID) || n.Shared || st.sharedWith(n.ID, c.projectID)
}

// networkVisible: usable ones plus external networks (access_as_external).
func (st *state) networkVisible(c *caller, n *Network) bool {
	return st.networkUsable(c, n) || n.External
}

func (st *state) subnetVisible(c *caller, s *Subnet) bool {
	if owns(c, s.ProjectID) {
		return true
	}
	n := st.networks[s.NetworkID]
	return n != nil && st.networkVisible(c, n)
}

// portVisible: owners of the port and owners of its network see it.
func (st *state) portVisible(c *caller, p *Port) bool {
	if owns(c, p.ProjectID) {
		return true
	}
	n := st.networks[p.NetworkID]
	return n != nil && owns(c, n.ProjectID)
}

// owns: the caller acts for the project (an admin for every project); a blind read
// sees none of its own.
func owns(c *caller, projectID string) bool { return c.admin || (!c.blind && projectID == c.projectID) }

// --- tags ---

// validTags applies Neutron's list_of_unique_strings: no empty or over-long tag, no
// duplicate. A comma is a legal character; only the filter syntax splits on it.
func validTags(tags []string) *apiError {
	seen := set{}
	for _, t := range tags {
		if t == "" || len(t) > 255 {
			return errf(400, "InvalidInput", "Invalid input for operation: '%s' is not a valid tag.", t)
		}
		if _, dup := seen[t]; dup {
			return errf(400, "InvalidInput", "Invalid input for operation: Duplicate items in the list: '%s'.", t)
		}
		seen[t] = struct{}{}
	}
	return nil
}

// dedupTags is how Neutron stores tags: a set, shown sorted.
func dedupTags(tags []string) []string {
	out := make([]string, 0, len(tags))
	seen := set{}
	for _, t := range tags {
		if _, ok := seen[t]; !ok {
			seen[t] = struct{}{}
			out = append(out, t)
		}
	}
	slices.Sort(out)
	return out
}

// --- subnets and addresses ---

func (st *state) networkSubnets(networkID string) []*Subnet {
	n := st.networks[networkID]
	if n == nil {
		return nil
	}
	out := make([]*Subnet, 0, len(n.Subnets))
	for _, id := range n.Subnets {
		if s := st.subnets[id]; s != nil {
			out = append(out, s)
		}
	}
	return out
}

// resolveFixedIPs claims addresses for a new or updated port. On error
// nothing stays claimed.
func (st *state) resolveFixedIPs(networkID, owner string, req []FixedIP, explicit bool) ([]FixedIP, *apiError) {
	var out []FixedIP
	rollback := func() {
		for _, f := range out {
			a, _ := netip.ParseAddr(f.IPAddress)
			st.pools[f.SubnetID].release(a)
		}
	}
	subnets := st.networkSubnets(networkID)
	if !explicit {
		if len(subnets) == 0 {
			return nil, nil
		}
		for _, s := range subnets {
			if a, ok := st.pools[s.ID].allocate(owner); ok {
				return []FixedIP{{SubnetID: s.ID, IPAddress: a.String()}}, nil
			}
		}
		return nil, errf(409, "IpAddressGenerationFailure", "No more IP addresses available on network %s.", networkID)
	}
	for _, f := range req {
		var sub *Subnet
		if f.SubnetID != "" {
			sub = st.subnets[f.SubnetID]
			if sub == nil || sub.NetworkID != networkID {
				rollback()
				return nil, errf(400, "InvalidInput", "Invalid input for operation: Failed to create port on network %s, because fixed_ips included invalid subnet %s.", networkID, f.SubnetID)
			}
		}
		if f.IPAddress == "" {
			if sub == nil {
				rollback()
				return nil, errf(400, "InvalidInput", "Invalid input for operation: IP allocation requires subnet_id or ip_address.")
			}
			a, ok := st.pools[sub.ID].allocate(owner)
			if !ok {
				rollback()
				return nil, errf(409, "IpAddressGenerationFailure", "No more IP addresses available for subnet %s.", sub.ID)
			}
			out = append(out, FixedIP{SubnetID: sub.ID, IPAddress: a.String()})
			continue
		}
		a, err := netip.ParseAddr(f.IPAddress)
		if err != nil {
			rollback()
			return nil, errf(400, "InvalidInput", "Invalid input for operation: '%s' is not a valid IP address.", f.IPAddress)
		}
		if sub == nil {
			for _, s := range subnets {
				if st.pools[s.ID].prefix.Contains(a) {
					sub = s
					break
				}
			}
			if sub == nil {
				rollback()
				return nil, errf(400, "InvalidIpForNetwork", "IP address %s is not a valid IP for any of the subnets on the specified network.", a)
			}
		}
		pool := st.pools[sub.ID]
		if !pool.usable(a) {
			rollback()
			return nil, errf(400, "InvalidIpForSubnet", "IP address %s is not a valid IP for the specified subnet.", a)
		}
		if pool.inUse(a) {
			rollback()
			return nil, errf(409, "IpAddressAlreadyAllocated", "IP address %s already allocated in subnet %s", a, sub.ID)
		}
		pool.claim(a, owner)
		out = append(out, FixedIP{SubnetID: sub.ID, IPAddress: a.String()})
	}
	return out, nil
}

func (st *state) releaseFixedIPs(ips []FixedIP) {
	for _, f := range ips {
		if pool := st.pools[f.SubnetID]; pool != nil {
			a, _ := netip.ParseAddr(f.IPAddress)
			pool.release(a)
		}
	}
}

// --- ports ---

type portSpec struct {
	id, networkID, projectID, name, description string
	deviceID, deviceOwner, mac                  string
	fixedIPs                                    []FixedIP
	explicitIPs                                 bool
	securityGroups                              *[]string
	pairs                                       []AddressPair
	tags                                        []string
	portSecurity                                *bool
	adminStateUp                                *bool
}

func (st *state) createPort(c *caller, sp portSpec) (*Port, *apiError) {
	n := st.networks[sp.networkID]
	if n == nil || !st.networkUsable(c, n) {
		return nil, errf(404, "NetworkNotFound", "Network %s could not be found.", sp.networkID)
	}
	if sp.projectID == "" {
		sp.projectID = c.projectID
	}
	if sp.projectID != c.projectID && !c.admin {
		return nil, errf(403, "PolicyNotAuthorized", "rule:create_port:project_id is disallowed by policy")
	}
	if e := validTags(sp.tags); e != nil {
		return nil, e
	}
	id := sp.id
	if id == "" {
		id = newID()
	}
	if _, dup := st.ports[id]; dup {
		return nil, errf(409, "Conflict", "Port %s already exists.", id)
	}
	mac := sp.mac
	if mac == "" {
		mac = st.newMAC()
	} else {
		if _, used := st.macs[mac]; used {
			return nil, errf(409, "MacAddressInUse", "Unable to complete operation for network %s. The mac address %s is in use.", n.ID, mac)
		}
		st.macs[mac] = struct{}{}
	}
	pairs, e := normalizePairs(sp.pairs, mac)
	if e != nil {
		delete(st.macs, mac)
		return nil, e
	}
	var sgs []string
	switch {
	case sp.securityGroups != nil:
		for _, g := range *sp.securityGroups {
			sg := st.sgs[g]
			if sg == nil || !owns(c, sg.ProjectID) {
				delete(st.macs, mac)
				return nil, errf(404, "SecurityGroupNotFound", "Security group %s does not exist", g)
			}
		}
		sgs = slices.Clone(*sp.securityGroups)
	case strings.HasPrefix(sp.deviceOwner, "network:"):
		// Neutron applies no security group to its own infrastructure ports.
	default:
		sgs = []string{st.ensureDefaultSG(sp.projectID)}
	}
	ips, e := st.resolveFixedIPs(n.ID, id, sp.fixedIPs, sp.explicitIPs)
	if e != nil {
		delete(st.macs, mac)
		return nil, e
	}
	t := now()
	p := &Port{
		ID: id, Name: sp.name, Description: sp.description, NetworkID: n.ID, ProjectID: sp.projectID,
		MACAddress: mac, FixedIPs: ips, DeviceID: sp.deviceID, DeviceOwner: sp.deviceOwner,
		Status: "DOWN", AdminStateUp: true, SecurityGroups: cloneStrings(sgs), AllowedAddressPairs: pairs,
		PortSecurityEnabled: true, Tags: dedupTags(sp.tags), RevisionNumber: 1, CreatedAt: t, UpdatedAt: t,
	}
	if p.FixedIPs == nil {
		p.FixedIPs = []FixedIP{}
	}
	if sp.portSecurity != nil {
		p.PortSecurityEnabled = *sp.portSecurity
	}
	if sp.adminStateUp != nil {
		p.AdminStateUp = *sp.adminStateUp
	}
	if p.DeviceOwner != "" && p.DeviceID != "" {
		p.Status = "ACTIVE"
	}
	st.ports[id] = p
	st.order(id)
	st.indexPort(p)
	return p, nil
}

// normalizePairs checks allowed-address pairs and fills in the port's MAC; Neutron
// keeps an address or CIDR as given and answers the pairs ordered by MAC and address.
func normalizePairs(in []AddressPair, mac string) ([]AddressPair, *apiError) {
	out := make([]AddressPair, 0, len(in))
	for _, ap := range in {
		if _, err := netip.ParseAddr(ap.IPAddress); err != nil {
			if _, err := netip.ParsePrefix(ap.IPAddress); err != nil {
				return nil, errf(400, "HTTPBadRequest", "'%s' is not a valid IP address", ap.IPAddress)
			}
		}
		given := ap.MACAddress
		if ap.MACAddress == "" {
			ap.MACAddress = mac
		}
		if slices.Contains(out, ap) {
			if given == "" {
				given = "None"
			}
			return nil, errf(400, "DuplicateAddressPairInRequest", "Request contains duplicate address pair: mac_address %s ip_address %s.", given, ap.IPAddress)
		}
		out = append(out, ap)
	}
	slices.SortFunc(out, func(a, b AddressPair) int {
		if c := strings.Compare(a.MACAddress, b.MACAddress); c != 0 {
			return c
		}
		return strings.Compare(a.IPAddress, b.IPAddress)
	})
	return out, nil
}

// deletePort removes a port and everything hanging off it in Neutron: its
// addresses, floating IP associations and, for a router interface, the
// router's side of the attachment.
func (st *state) deletePort(p *Port) {
	st.unindexPort(p)
	st.releaseFixedIPs(p.FixedIPs)
	delete(st.macs, p.MACAddress)
	delete(st.ports, p.ID)
	delete(st.seq, p.ID)
	delete(st.novaPorts, p.ID)
	for _, f := range st.fips {
		if f.PortID == p.ID {
			f.PortID, f.FixedIPAddress, f.RouterID, f.Status = "", "", "", "DOWN"
			f.RevisionNumber++
			f.UpdatedAt = now()
		}
	}
}

func (st *state) ensureDefaultSG(projectID string) string {
	if id, ok := st.defaultSG[projectID]; ok {
		if _, live := st.sgs[id]; live {
			return id
		}
	}
	sg := st.newSecurityGroup(projectID, "default", "Default security group", nil)
	// The default group also admits traffic from its own members.
	for _, et := range []string{"IPv4", "IPv6"} {
		st.addRule(sg, SecurityGroupRule{Direction: "ingress", EtherType: et, RemoteGroupID: sg.ID})
	}
	st.defaultSG[projectID] = sg.ID
	return sg.ID
}

func (st *state) newSecurityGroup(projectID, name, desc string, tags []string) *SecurityGroup {
	t := now()
	sg := &SecurityGroup{ID: newID(), Name: name, Description: desc, ProjectID: projectID, Stateful: true,
		Rules: []SecurityGroupRule{}, Tags: dedupTags(tags), RevisionNumber: 1, CreatedAt: t, UpdatedAt: t}
	st.sgs[sg.ID] = sg
	st.order(sg.ID)
	// Like Neutron, a new group allows all egress.
	for _, et := range []string{"IPv4", "IPv6"} {
		st.addRule(sg, SecurityGroupRule{Direction: "egress", EtherType: et})
	}
	return sg
}

func (st *state) addRule(sg *SecurityGroup, r SecurityGroupRule) SecurityGroupRule {
	t := now()
	r.ID = newID()
	r.SecurityGroupID = sg.ID
	r.ProjectID = sg.ProjectID
	r.RevisionNumber = 0
	r.CreatedAt, r.UpdatedAt = t, t
	sg.Rules = append(sg.Rules, r)
	sg.RevisionNumber++
	st.sgRules[r.ID] = sg.ID
	return r
}

// --- routers ---

// routerInterfaces are the router's interface ports (not its gateway).
func (st *state) routerInterfaces(routerID string) []*Port {
	var out []*Port
	for id := range st.portsByDevice[routerID] {
		if p := st.ports[id]; p != nil && p.DeviceOwner == OwnerRouterInterface {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return st.seq[out[i].ID] < st.seq[out[j].ID] })
	return out
}

// routerPrefixes are the subnets the router is directly connected to, with
// the router's own address on each.
func (st *state) routerPrefixes(r *Router) (map[netip.Prefix]bool, set) {
	pfx := map[netip.Prefix]bool{}
	own := set{}
	for _, p := range st.routerInterfaces(r.ID) {
		for _, f := range p.FixedIPs {
			if pool := st.pools[f.SubnetID]; pool != nil {
				pfx[pool.prefix] = true
			}
			own[f.IPAddress] = struct{}{}
		}
	}
	if r.GatewayInfo != nil {
		for _, f := range r.GatewayInfo.ExternalFixedIPs {
			if pool := st.pools[f.SubnetID]; pool != nil {
				pfx[pool.prefix] = true
			}
			own[f.IPAddress] = struct{}{}
		}
	}
	return pfx, own
}

// validateRoutes applies Neutron's extraroute checks: a valid destination
// CIDR and a nexthop on a subnet the router is connected to that is not the
// router's own address.
func (st *state) validateRoutes(r *Router, routes []Route) ([]Route, *apiError) {
	pfx, own := st.routerPrefixes(r)
	out := make([]Route, 0, len(routes))
	for _, rt := range routes {
		// Neutron parses with netaddr and stores the route as given: a destination
		// with host bits set stays so.
		if _, err := netip.ParsePrefix(rt.Destination); err != nil {
			return nil, errf(400, "AddrFormatError", "invalid IPNetwork %s", rt.Destination)
		}
		nh, err := netip.ParseAddr(rt.NextHop)
		if err != nil {
			return nil, errf(400, "AddrFormatError", "failed to detect a valid IP address from '%s'", rt.NextHop)
		}
		if _, mine := own[nh.String()]; mine {
			return nil, errf(400, "InvalidRoutes", "Invalid format for routes: %v, the nexthop is used by router", []Route{rt})
		}
		connected := false
		for p := range pfx {
			if p.Contains(nh) {
				connected = true
				break
			}
		}
		if !connected {
			return nil, errf(400, "InvalidRoutes", "Invalid format for routes: %v, the nexthop is not connected with router", []Route{rt})
		}
		out = append(out, rt)
	}
	return out, nil
}

func (st *state) checkMaxRoutes(n int) *apiError {
	if st.maxRoutes > 0 && n > st.maxRoutes {
		return errf(400, "RoutesExhausted", "Unable to complete operation for %s. The number of routes exceeds the maximum %d.", "router", st.maxRoutes)
	}
	return nil
}

func (st *state) touchRouter(r *Router) {
	r.RevisionNumber++
	r.UpdatedAt = now()
}

// attachInterface wires an existing port to a router, with Neutron's checks.
func (st *state) attachInterface(c *caller, r *Router, p *Port) *apiError {
	if p.DeviceID != "" || (p.DeviceOwner != "" && p.DeviceOwner != OwnerRouterInterface) {
		return errf(409, "PortInUse", "Unable to complete operation on port %s for network %s. Port already has an attached device %s.", p.ID, p.NetworkID, p.DeviceID)
	}
	if len(p.FixedIPs) == 0 {
		return errf(400, "BadRequest", "Bad router request: Router port must have at least one fixed IP.")
	}
	if !c.admin && p.ProjectID != r.ProjectID {
		return errf(400, "BadRequest", "Bad router request: Cannot add interface to router %s: port %s is owned by another project.", r.ID, p.ID)
	}
	if r.GatewayInfo != nil && r.GatewayInfo.NetworkID == p.NetworkID {
		return errf(400, "BadRequest", "Bad router request: Router already has a port on subnet %s.", p.FixedIPs[0].SubnetID)
	}
	have := map[string]*ipPool{}
	for _, ip := range st.routerInterfaces(r.ID) {
		for _, f := range ip.FixedIPs {
			have[f.SubnetID] = st.pools[f.SubnetID]
		}
	}
	for _, f := range p.FixedIPs {
		if _, dup := have[f.SubnetID]; dup {
			return errf(400, "BadRequest", "Bad router request: Router already has a port on subnet %s.", f.SubnetID)
		}
		np := st.pools[f.SubnetID]
		for sid, hp := range have {
			if hp != nil && np != nil && hp.prefix.Overlaps(np.prefix) {
				return errf(400, "BadRequest", "Bad router request: Cidr %s of subnet %s overlaps with cidr %s of subnet %s.", np.prefix, f.SubnetID, hp.prefix, sid)
			}
		}
	}
	st.mutatePort(p, func(p *Port) {
		p.DeviceID = r.ID
		p.DeviceOwner = OwnerRouterInterface
		p.Status = "ACTIVE"
		p.SecurityGroups = []string{}
	})
	st.touchRouter(r)
	return nil
}

// detachInterface refuses while a route still needs the subnet, then
// deletes the port, as Neutron's remove_router_interface does.
func (st *state) detachInterface(r *Router, p *Port) *apiError {
	for _, f := range p.FixedIPs {
		pool := st.pools[f.SubnetID]
		if pool == nil {
			continue
		}
		for _, rt := range r.Routes {
			if nh, err := netip.ParseAddr(rt.NextHop); err == nil && pool.prefix.Contains(nh) {
				return errf(409, "RouterInterfaceInUseByRoute", "Router interface for subnet %s on router %s cannot be deleted, as it is required by one or more routes.", f.SubnetID, r.ID)
			}
		}
	}
	st.deletePort(p)
	st.touchRouter(r)
	return nil
}

// --- the prologue every Neutron create shares ---

// createProject is the project a create request makes its object in: the one it names
// (project_id, or the older tenant_id), else the caller's own; naming another project
// takes admin, as Neutron's rule:<action>:project_id says.
func createProject(c *caller, action, projectID, tenantID string) (string, *apiError) {
	project := firstNonEmpty(projectID, tenantID, c.projectID)
	if project != c.projectID && !c.admin {
		return "", errf(403, "PolicyNotAuthorized", "rule:%s:project_id is disallowed by policy", action)
	}
	return project, nil
}

// createTags is what a create does with the tags it was sent: kept or dropped as the
// release's extensions decide (tagsAtCreate), then validated, then the project's quota
// for the kind checked (quotaKind "" checks none). The caller holds st.mu.
func (st *state) createTags(raw []string, project, quotaKind string) ([]string, *apiError) {
	tags, e := st.tagsAtCreate(false, raw)
	if e == nil {
		e = validTags(tags)
	}
	if e == nil && quotaKind != "" {
		e = st.checkQuota(project, quotaKind)
	}
	return tags, e
}
