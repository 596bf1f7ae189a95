package openstacksim

import (
	"net/http"
	"net/netip"
	"strings"
	"time"
)

func (s *Server) novaFail(w http.ResponseWriter, e *apiError) { writeError(w, svcCompute, e) }

func (s *Server) handleComputeVersions(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"versions": []any{s.computeVersion()}})
}

func (s *Server) handleComputeV21(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{"version": s.computeVersion()})
}

func (s *Server) computeVersion() map[string]any {
	return map[string]any{"id": "v2.1", "status": "CURRENT", "version": "2.96", "min_version": "2.1",
		"updated": "2013-07-23T11:33:21Z", "links": []any{map[string]string{"rel": "self", "href": s.ComputeEndpoint()}}}
}

// SetNovaDelays makes attach and detach take effect only after the given
// delays (the API answers at once), like Nova finishing the work in the
// background. Zero (the default) applies them before answering.
func (s *Server) SetNovaDelays(attach, detach time.Duration) {
	s.delayMu.Lock()
	s.attachDelay, s.detachDelay = attach, detach
	s.delayMu.Unlock()
}

func (s *Server) novaDelays() (time.Duration, time.Duration) {
	s.delayMu.Lock()
	defer s.delayMu.Unlock()
	return s.attachDelay, s.detachDelay
}

// later runs fn under the state lock after d, or now when d is zero.
func (s *Server) later(d time.Duration, fn func()) {
	if d <= 0 {
		fn()
		return
	}
	s.pendingNova.Add(1)
	go func() {
		defer s.pendingNova.Done()
		select {
		case <-time.After(d):
		case <-s.closed:
			return
		}
		s.st.mu.Lock()
		defer s.st.mu.Unlock()
		fn()
	}()
}

func (st *state) visibleServer(c *caller, id string) (*Instance, *apiError) {
	in := st.servers[id]
	if in == nil || !owns(c, in.ProjectID) {
		return nil, errf(404, "InstanceNotFound", "Instance %s could not be found.", id)
	}
	return in, nil
}

// serverInterfaces are the compute ports bound to a server.
func (st *state) serverInterfaces(serverID string) []*Port {
	var out []*Port
	for id := range st.portsByDevice[serverID] {
		if p := st.ports[id]; p != nil && strings.HasPrefix(p.DeviceOwner, "compute:") {
			out = append(out, p)
		}
	}
	ids := make([]string, len(out))
	for i, p := range out {
		ids[i] = p.ID
	}
	st.sortIDs(ids)
	for i, id := range ids {
		out[i] = st.ports[id]
	}
	return out
}

func (st *state) serverOut(in *Instance) map[string]any {
	addrs := map[string][]map[string]any{}
	for _, p := range st.serverInterfaces(in.ID) {
		name := p.NetworkID
		if n := st.networks[p.NetworkID]; n != nil && n.Name != "" {
			name = n.Name
		}
		for _, f := range p.FixedIPs {
			v := 4
			if a, err := netip.ParseAddr(f.IPAddress); err == nil && a.Is6() {
				v = 6
			}
			addrs[name] = append(addrs[name], map[string]any{"addr": f.IPAddress, "version": v,
				"OS-EXT-IPS:type": "fixed", "OS-EXT-IPS-MAC:mac_addr": p.MACAddress})
		}
	}
	return map[string]any{
		"id": in.ID, "name": in.Name, "status": in.Status, "tenant_id": in.ProjectID, "user_id": "",
		"created": in.CreatedAt, "updated": in.UpdatedAt, "hostId": seedID("host", in.Host),
		"OS-EXT-SRV-ATTR:host": in.Host, "OS-EXT-SRV-ATTR:hypervisor_hostname": in.Host,
		"OS-EXT-STS:vm_state": strings.ToLower(in.Status), "OS-EXT-STS:power_state": 1, "OS-EXT-STS:task_state": nil,
		"addresses": addrs, "metadata": map[string]string{}, "flavor": map[string]any{}, "image": "",
		"links": []any{}, "security_groups": []any{}, "accessIPv4": "", "accessIPv6": "",
	}
}

func (s *Server) listServers(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	st := s.st
	st.mu.RLock()
	defer st.mu.RUnlock()
	// Nova's name filter is a pattern, not an exact match.
	name := q.Get("name")
	writeList(st, w, r, "servers", inOrder(st, st.servers), func(in *Instance) bool {
		return owns(c, in.ProjectID) && (name == "" || strings.Contains(in.Name, name)) && fieldMatch(q, "status", in.Status)
	}, st.serverOut)
}

// readServer runs fn on the server the path names, under the read lock,
// after answering the 404 itself when the caller cannot see it.
func (s *Server) readServer(w http.ResponseWriter, r *http.Request, c *caller, fn func(in *Instance)) {
	s.st.mu.RLock()
	defer s.st.mu.RUnlock()
	in, e := s.st.visibleServer(c, r.PathValue("id"))
	if e != nil {
		s.novaFail(w, e)
		return
	}
	fn(in)
}

func (s *Server) getServer(w http.ResponseWriter, r *http.Request, c *caller) {
	s.readServer(w, r, c, func(in *Instance) {
		writeJSON(w, 200, map[string]any{"server": s.st.serverOut(in)})
	})
}

func attachmentOut(p *Port) map[string]any {
	ips := make([]map[string]string, 0, len(p.FixedIPs))
	for _, f := range p.FixedIPs {
		ips = append(ips, map[string]string{"subnet_id": f.SubnetID, "ip_address": f.IPAddress})
	}
	return map[string]any{"port_id": p.ID, "net_id": p.NetworkID, "mac_addr": p.MACAddress, "port_state": p.Status,
		"fixed_ips": ips, "tag": nil}
}

func (s *Server) listInterfaces(w http.ResponseWriter, r *http.Request, c *caller) {
	s.readServer(w, r, c, func(in *Instance) {
		out := []map[string]any{}
		for _, p := range s.st.serverInterfaces(in.ID) {
			out = append(out, attachmentOut(p))
		}
		writeJSON(w, 200, map[string]any{"interfaceAttachments": out})
	})
}

func (s *Server) getInterface(w http.ResponseWriter, r *http.Request, c *caller) {
	s.readServer(w, r, c, func(in *Instance) {
		for _, p := range s.st.serverInterfaces(in.ID) {
			if p.ID == r.PathValue("port") {
				writeJSON(w, 200, map[string]any{"interfaceAttachment": attachmentOut(p)})
				return
			}
		}
		s.novaFail(w, errf(404, "PortNotFound", "Port %s is not attached", r.PathValue("port")))
	})
}

func (s *Server) attachInterface(w http.ResponseWriter, r *http.Request, c *caller) {
	var b struct {
		IA struct {
			PortID   string    `json:"port_id"`
			NetID    string    `json:"net_id"`
			FixedIPs []FixedIP `json:"fixed_ips"`
		} `json:"interfaceAttachment"`
	}
	if e := decode(r, &b); e != nil {
		s.novaFail(w, e)
		return
	}
	attachDelay, _ := s.novaDelays()
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	in, e := st.visibleServer(c, r.PathValue("id"))
	if e != nil {
		s.novaFail(w, e)
		return
	}
	switch in.Status {
	case "ACTIVE", "SHUTOFF", "PAUSED":
	default:
		s.novaFail(w, errf(409, "InstanceInvalidState", "Cannot 'attach_interface' instance %s while it is in vm_state %s", in.ID, strings.ToLower(in.Status)))
		return
	}
	var p *Port
	switch {
	case b.IA.PortID != "":
		p = st.ports[b.IA.PortID]
		if p == nil || !st.portVisible(c, p) {
			s.novaFail(w, errf(404, "PortNotFound", "Port id %s could not be found.", b.IA.PortID))
			return
		}
		if !c.admin && p.ProjectID != in.ProjectID {
			s.novaFail(w, errf(400, "PortNotUsable", "Port %s not usable for instance %s.", p.ID, in.ID))
			return
		}
		if p.DeviceID != "" || p.DeviceOwner != "" && !strings.HasPrefix(p.DeviceOwner, "compute:") {
			s.novaFail(w, errf(409, "PortInUse", "Port %s is still in use.", p.ID))
			return
		}
	case b.IA.NetID != "":
		sp := portSpec{networkID: b.IA.NetID, projectID: in.ProjectID}
		if len(b.IA.FixedIPs) > 0 {
			sp.fixedIPs, sp.explicitIPs = b.IA.FixedIPs, true
		}
		var pe *apiError
		p, pe = st.createPort(c, sp)
		if pe != nil {
			if pe.status == 404 {
				pe = errf(404, "NetworkNotFound", "Network %s could not be found.", b.IA.NetID)
			}
			s.novaFail(w, pe)
			return
		}
		st.novaPorts[p.ID] = struct{}{}
	default:
		s.novaFail(w, errf(400, "BadRequest", "Either port_id or net_id must be given."))
		return
	}
	out := attachmentOut(p)
	out["port_state"] = "ACTIVE"
	serverID, host, portID := in.ID, in.Host, p.ID
	s.later(attachDelay, func() {
		if p := st.ports[portID]; p != nil {
			st.mutatePort(p, func(p *Port) {
				p.DeviceID, p.DeviceOwner, p.HostID, p.Status = serverID, OwnerCompute, host, "ACTIVE"
			})
		}
	})
	writeJSON(w, 200, map[string]any{"interfaceAttachment": out})
}

func (s *Server) detachInterface(w http.ResponseWriter, r *http.Request, c *caller) {
	_, detachDelay := s.novaDelays()
	st := s.st
	st.mu.Lock()
	defer st.mu.Unlock()
	in, e := st.visibleServer(c, r.PathValue("id"))
	if e != nil {
		s.novaFail(w, e)
		return
	}
	portID := r.PathValue("port")
	p := st.ports[portID]
	if p == nil || p.DeviceID != in.ID || !strings.HasPrefix(p.DeviceOwner, "compute:") {
		// Nova casts the detach to the compute host, which finds nothing to do: the
		// API accepts it all the same.
		w.WriteHeader(http.StatusAccepted)
		return
	}
	serverID := in.ID
	s.later(detachDelay, func() { st.detachPort(serverID, portID) })
	w.WriteHeader(http.StatusAccepted)
}

// detachPort unbinds a port from a server; ports Nova created for a net_id
// attach are deleted, as Nova does.
func (st *state) detachPort(serverID, portID string) bool {
	p := st.ports[portID]
	if p == nil || p.DeviceID != serverID {
		return false
	}
	if _, mine := st.novaPorts[portID]; mine {
		st.deletePort(p)
		return true
	}
	st.mutatePort(p, func(p *Port) {
		p.DeviceID, p.DeviceOwner, p.HostID, p.Status = "", "", "", "DOWN"
	})
	return true
}
