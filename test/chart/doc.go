// Package chart tests the Helm chart in charts/bnerd-vpn-operator: it lints and renders the
// chart with the Helm SDK, checks the rendered objects against what the operator reads and
// what its generated RBAC and CRDs say, and applies them to a real API server.
//
// It is a module of its own so that Helm's dependency graph never reaches the operator's
// go.mod.
package chart
