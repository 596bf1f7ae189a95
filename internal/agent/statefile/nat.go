package statefile

// NATState is what init-nat records after every apply and the exporter publishes. It is
// defined here, with the file that carries it, so that neither container's package
// imports the other's.
type NATState struct {
	ApplyErrors          uint64  `json:"applyErrors"`
	Applies              uint64  `json:"applies"`
	LastApplySeconds     float64 `json:"lastApplySeconds"`
	DriftRepairs         uint64  `json:"driftRepairs"`
	LastApplyUnixSeconds int64   `json:"lastApplyUnixSeconds"`
	// GuardDroppedPackets is what the fail-closed guard rules have dropped since init-nat
	// started (monotonic across table rewrites).
	GuardDroppedPackets uint64 `json:"guardDroppedPackets"`
}

// WriteNATState replaces path with st, atomically and never through a link (Write).
func WriteNATState(path string, st NATState) error {
	return WriteJSON(path, st)
}
