// Package version holds the operator's release version, stamped at build time with
// -ldflags "-X bnerd.net/vpn-operator/internal/version.Version=...".
package version

// Version is the operator release. Validation messages name it when they refuse a
// feature the API accepts but this release does not implement yet.
var Version = "v0.1.0"
