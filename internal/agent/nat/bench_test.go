package nat

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"bnerd.net/vpn-operator/internal/gatewayconfig"
)

// Benchmarks run by hand as root, each inside its own network namespace:
//
//	go test -run XXX -bench . -benchtime 5x ./internal/agent/nat
//
// They compare the agent's map-based nftables table with the original design's
// iptables script (one DNAT rule per exposure port, applied with iptables-restore).

// benchNetns runs f in a fresh network namespace on its own locked thread; f reports a
// failure by returning it (a benchmark must not call b.Fatal off its own goroutine).
func benchNetns(b *testing.B, f func() error) {
	b.Helper()
	var err error
	inNetns(b, func() { err = f() })
	if err != nil {
		b.Fatal(err)
	}
}

func BenchmarkFullApply(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("nft-maps/%d", n), func(b *testing.B) {
			benchNetns(b, func() error {
				m := model(n)
				p, err := New(Options{})
				if err != nil {
					return err
				}
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					p.Invalidate() // every iteration rewrites chains, sets and maps
					if full, err := p.Sync(context.Background(), m); err != nil || !full {
						return fmt.Errorf("full=%v err=%v", full, err)
					}
				}
				return nil
			})
		})
		b.Run(fmt.Sprintf("iptables-restore/%d", n), func(b *testing.B) {
			benchNetns(b, func() error {
				script := iptablesScript(model(n))
				for i := 0; i < b.N; i++ {
					if err := restore(script, false); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// BenchmarkElementChange adds one exposure to a table holding n, and removes one, as
// separate measurements: the agent's incremental path (the changed elements only, one
// knftables transaction). Between iterations (untimed) the element is put back or taken
// out again and 20 ms pass, as between two config changes (seconds in practice).
// "iptables" appends or deletes one DNAT rule with iptables-restore --noflush, the
// original design, for comparison. (Until the commit that removed it, a hand-written
// netlink element encoder ran here as a third path; docs/benchmarks.md has the figures
// that decided against it.)
func BenchmarkElementChange(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		for _, path := range []string{"knftables"} {
			for _, op := range []string{"add", "remove"} {
				b.Run(fmt.Sprintf("%s/%s/%d", path, op, n), func(b *testing.B) {
					benchNetns(b, func() error {
						p, err := New(Options{})
						if err != nil {
							return err
						}
						base, plus := model(n), model(n+1)
						sync := func(m *gatewayconfig.NAT) error {
							if full, err := p.Sync(context.Background(), m); err != nil || full {
								return fmt.Errorf("full=%v err=%v", full, err)
							}
							return nil
						}
						if _, err := p.Sync(context.Background(), base); err != nil {
							return err
						}
						before, after := base, plus
						if op == "remove" {
							before, after = plus, base
						}
						b.ResetTimer()
						for i := 0; i < b.N; i++ {
							b.StopTimer()
							if err := sync(before); err != nil {
								return err
							}
							time.Sleep(20 * time.Millisecond)
							b.StartTimer()
							if err := sync(after); err != nil {
								return err
							}
						}
						return nil
					})
				})
			}
		}
		for _, op := range []string{"add", "remove"} {
			b.Run(fmt.Sprintf("iptables/%s/%d", op, n), func(b *testing.B) {
				benchNetns(b, func() error {
					if err := restore(iptablesScript(model(n)), false); err != nil {
						return err
					}
					pm := model(n + 1).ExposurePorts[n]
					rule := fmt.Sprintf("PREROUTING -i ipsec0 -d %s/32 -p tcp --dport 443 -j DNAT --to-destination 203.0.113.20:443", pm.VirtualIP)
					add, del := "*nat\n-A "+rule+"\nCOMMIT\n", "*nat\n-D "+rule+"\nCOMMIT\n"
					before, after := del, add
					if op == "remove" {
						before, after = add, del
					}
					if err := restore(add, true); err != nil {
						return err
					}
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						b.StopTimer()
						if i > 0 || op == "add" {
							if err := restore(before, true); err != nil {
								return err
							}
						}
						time.Sleep(20 * time.Millisecond)
						b.StartTimer()
						if err := restore(after, true); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}

func BenchmarkDriftCheck(b *testing.B) {
	for _, n := range []int{100, 10000} {
		for _, elements := range []bool{false, true} {
			b.Run(fmt.Sprintf("%d/elements=%v", n, elements), func(b *testing.B) {
				benchNetns(b, func() error {
					p, err := New(Options{})
					if err != nil {
						return err
					}
					if _, err := p.Sync(context.Background(), model(n)); err != nil {
						return err
					}
					d := NewDriftChecker(p)
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						if msg, err := d.Check(elements); msg != "" || err != nil {
							return fmt.Errorf("%q %v", msg, err)
						}
					}
					return nil
				})
			})
		}
	}
}

// iptablesScript renders the same model as the original design's iptables script:
// one DNAT rule per exposure port, walked linearly by every new connection.
func iptablesScript(m *gatewayconfig.NAT) string {
	var w strings.Builder
	w.WriteString("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n")
	for _, pm := range m.ExposurePorts {
		fmt.Fprintf(&w, "-A PREROUTING -i ipsec0 -d %s/32 -p %s --dport %d -j DNAT --to-destination %s:%d\n", pm.VirtualIP, pm.Protocol, pm.Port, pm.Target, pm.TargetPort)
	}
	for _, am := range m.ReverseAll {
		fmt.Fprintf(&w, "-A PREROUTING ! -i ipsec0 -d %s/32 -j DNAT --to-destination %s\n", am.VirtualIP, am.Target)
	}
	fmt.Fprintf(&w, "-A POSTROUTING -m conntrack --ctstate DNAT -d %s -j SNAT --to-source %s\n", m.PeerSubnets[0], m.ReverseSNATAddress)
	fmt.Fprintf(&w, "-A POSTROUTING -m conntrack --ctstate DNAT -s %s -j SNAT --to-source %s\n", m.PeerSubnets[0], m.ForwardSNATAddress)
	w.WriteString("COMMIT\n*mangle\n:FORWARD ACCEPT [0:0]\n-A FORWARD -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu\nCOMMIT\n")
	fmt.Fprintf(&w, "*filter\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -d %s ! -o ipsec0 -j DROP\n-A OUTPUT -d %s ! -o ipsec0 -j DROP\nCOMMIT\n", m.PeerSubnets[0], m.PeerSubnets[0])
	return w.String()
}

func restore(script string, noflush bool) error {
	args := []string{}
	if noflush {
		args = append(args, "--noflush")
	}
	cmd := exec.Command("iptables-restore", args...)
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore: %v %s", err, out)
	}
	return nil
}
