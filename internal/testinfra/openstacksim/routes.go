package openstacksim

func (s *Server) routes() {
	m := s.mux
	id := identityPrefix + "/v3"
	m.HandleFunc("GET "+identityPrefix+"/{$}", s.handleIdentityVersions)
	m.HandleFunc("GET "+identityPrefix, s.handleIdentityVersions)
	m.HandleFunc("GET "+id+"/{$}", s.handleIdentityV3)
	m.HandleFunc("GET "+id, s.handleIdentityV3)
	m.HandleFunc("POST "+id+"/auth/tokens", s.handleIssueToken)
	m.HandleFunc("GET "+id+"/auth/tokens", s.handleValidateToken)
	m.HandleFunc("DELETE "+id+"/auth/tokens", s.handleRevokeToken)
	m.Handle("GET "+id+"/projects/{id}", s.authed(svcIdentity, s.handleGetProject))

	// Version documents are public, as in Neutron and Nova.
	m.HandleFunc("GET "+networkPrefix+"/{$}", s.handleNetworkVersions)
	m.HandleFunc("GET "+networkPrefix, s.handleNetworkVersions)
	m.HandleFunc("GET "+computePrefix+"/{$}", s.handleComputeVersions)
	m.HandleFunc("GET "+computePrefix+"/v2.1/{$}", s.handleComputeV21)
	m.HandleFunc("GET "+computePrefix+"/v2.1", s.handleComputeV21)

	n := func(pattern string, h hfn) {
		method, path, _ := cut(pattern)
		m.Handle(method+" "+neutronBase+path, s.authed(svcNetwork, h))
	}
	n("GET /extensions", s.handleExtensions)
	n("GET /networks", s.listNetworks)
	n("POST /networks", s.createNetwork)
	n("GET /networks/{id}", neutronGet(s, "network", s.st.visibleNetwork, networkOut))
	n("PUT /networks/{id}", s.updateNetwork)
	n("DELETE /networks/{id}", neutronDelete(s, s.st.visibleNetwork, s.st.refuseNetworkDelete, s.st.deleteNetwork))
	n("GET /subnets", s.listSubnets)
	n("POST /subnets", s.createSubnet)
	n("GET /subnets/{id}", neutronGet(s, "subnet", s.st.visibleSubnet, subnetOut))
	n("DELETE /subnets/{id}", neutronDelete(s, s.st.visibleSubnet, s.st.refuseSubnetDelete, s.st.deleteSubnet))
	n("GET /ports", s.listPorts)
	n("POST /ports", s.createPort)
	n("GET /ports/{id}", neutronGet(s, "port", s.st.visiblePort, portOut))
	n("PUT /ports/{id}", s.updatePort)
	n("DELETE /ports/{id}", neutronDelete(s, s.st.visiblePort, refusePortDelete, s.st.deletePort))
	n("GET /security-groups", s.listSGs)
	n("POST /security-groups", s.createSG)
	n("GET /security-groups/{id}", neutronGet(s, "security_group", s.st.visibleSG, sgOut))
	n("PUT /security-groups/{id}", s.updateSG)
	n("DELETE /security-groups/{id}", neutronDelete(s, s.st.visibleSG, s.st.refuseSGDelete, s.st.deleteSG))
	n("GET /security-group-rules", s.listRules)
	n("POST /security-group-rules", s.createRule)
	n("GET /security-group-rules/{id}", s.getRule)
	n("DELETE /security-group-rules/{id}", s.deleteRule)
	n("GET /floatingips", s.listFIPs)
	n("POST /floatingips", s.createFIP)
	n("GET /floatingips/{id}", neutronGet(s, "floatingip", s.st.visibleFIP, fipOut))
	n("PUT /floatingips/{id}", s.updateFIP)
	n("DELETE /floatingips/{id}", neutronDelete(s, s.st.visibleFIP, mayDelete[FloatingIP], s.st.deleteFIP))
	n("GET /routers", s.listRouters)
	n("POST /routers", s.createRouter)
	n("GET /routers/{id}", neutronGet(s, "router", s.st.visibleRouter, routerOut))
	n("PUT /routers/{id}", s.updateRouter)
	n("DELETE /routers/{id}", neutronDelete(s, s.st.visibleRouter, s.st.refuseRouterDelete, s.st.deleteRouter))
	n("PUT /routers/{id}/add_router_interface", s.addRouterInterface)
	n("PUT /routers/{id}/remove_router_interface", s.removeRouterInterface)
	n("PUT /routers/{id}/add_extraroutes", s.extraRoutes(true))
	n("PUT /routers/{id}/remove_extraroutes", s.extraRoutes(false))
	n("GET /quotas/{id}/details.json", s.quotaDetails)
	n("GET /rbac-policies", s.listRBAC)
	n("POST /rbac-policies", s.createRBAC)
	n("GET /rbac-policies/{id}", neutronGet(s, "rbac_policy", s.st.visibleRBAC, rbacOut))
	n("DELETE /rbac-policies/{id}", neutronDelete(s, s.st.visibleRBAC, s.st.rbacInUse, s.st.deleteRBAC))
	for _, res := range []string{"networks", "subnets", "ports", "routers", "security-groups", "floatingips"} {
		for pat, h := range s.tagHandlers(res) {
			method, sub, _ := cut(pat)
			n(method+" /"+res+"/{id}"+sub, h)
		}
	}

	c := func(pattern string, h hfn) {
		method, path, _ := cut(pattern)
		m.Handle(method+" "+computePrefix+"/v2.1"+path, s.authed(svcCompute, h))
	}
	c("GET /servers", s.listServers)
	c("GET /servers/detail", s.listServers)
	c("GET /servers/{id}", s.getServer)
	c("GET /servers/{id}/os-interface", s.listInterfaces)
	c("POST /servers/{id}/os-interface", s.attachInterface)
	c("GET /servers/{id}/os-interface/{port}", s.getInterface)
	c("DELETE /servers/{id}/os-interface/{port}", s.detachInterface)

}

func cut(pattern string) (method, path string, ok bool) {
	for i := 0; i < len(pattern); i++ {
		if pattern[i] == ' ' {
			return pattern[:i], pattern[i+1:], true
		}
	}
	return "", pattern, false
}
