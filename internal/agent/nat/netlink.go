package nat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	gnft "github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// errNeedsFull: an element change that this path does not encode the way nft would
// (intervals touching 0.0.0.0 or 255.255.255.255, where nft adds or omits boundary
// elements and annotates open intervals). Sync then rewrites the table instead.
var errNeedsFull = errors.New("element change needs a full sync")

// Element list attributes carry a 16-bit length; elements are split over several
// messages of the same batch well below it. The batch stays one transaction.
const maxElementBytesPerMessage = 32 << 10

// maxCommentLen is nft's limit for comments (NFTNL_UDATA_COMMENT_MAXLEN); the kernel
// would take longer ones, the full path would not.
const maxCommentLen = 128

var protocolNumbers = map[string]byte{"tcp": unix.IPPROTO_TCP, "udp": unix.IPPROTO_UDP}

// writeElementsNetlink sends ops as one netlink batch (one atomic transaction) to the
// existing sets and maps of table, addressed by name. It never dumps the table, so its
// cost depends on the number of changed elements only.
func writeElementsNetlink(table string, ops []elemOp) error {
	type group struct {
		del   bool
		set   string
		elems []gnft.SetElement
		bytes int
	}
	var groups []*group
	total := 0
	for _, op := range ops {
		if len(op.owner) > maxCommentLen {
			return fmt.Errorf("comment %q longer than %d characters", op.owner, maxCommentLen)
		}
		els, err := encodeOp(op)
		if err != nil {
			return err
		}
		for _, e := range els {
			size := elementSize(e)
			total += size
			g := (*group)(nil)
			if n := len(groups); n > 0 {
				g = groups[n-1]
			}
			if g == nil || g.del != op.del || g.set != op.mapName || g.bytes+size > maxElementBytesPerMessage {
				g = &group{del: op.del, set: op.mapName}
				groups = append(groups, g)
			}
			g.elems = append(g.elems, e)
			g.bytes += size
		}
	}
	total += 256 * (len(groups) + 2)

	connOpts := []gnft.ConnOption{gnft.AsLasting(), withDeadline()}
	if total > 64<<10 {
		// One batch is one sendmsg; the default send buffer would reject large ones.
		connOpts = append(connOpts, gnft.WithSockOptions(sendBuffer(total)))
	}
	conn, err := gnft.New(connOpts...)
	if err != nil {
		return fmt.Errorf("nftables netlink: %w", err)
	}
	// Releasing a socket that ran a batch waits for nf_tables' deferred cleanup (an RCU
	// grace period, ~6 ms here). The transaction is committed once Flush has its acks,
	// so the caller does not wait for the release.
	defer func() { go conn.CloseLasting() }() //nolint:errcheck
	tbl := &gnft.Table{Name: table, Family: gnft.TableFamilyIPv4}
	for _, g := range groups {
		set := &gnft.Set{Table: tbl, Name: g.set}
		if g.del {
			err = conn.SetDeleteElements(set, g.elems)
		} else {
			err = conn.SetAddElements(set, g.elems)
		}
		if err != nil {
			return fmt.Errorf("encoding %s: %w", g.set, err)
		}
	}
	return conn.Flush()
}

// NetlinkTimeout bounds every nftables netlink exchange of the agent (an element batch,
// a drift check's dump): a kernel that never answers must not stall the role.
const NetlinkTimeout = 10 * time.Second

// withDeadline sets the socket's deadline when it is dialled (for a non-lasting
// connection, every operation dials anew and gets a fresh deadline).
func withDeadline() gnft.ConnOption {
	return gnft.WithSockOptions(func(c *netlink.Conn) error {
		return c.SetDeadline(time.Now().Add(NetlinkTimeout))
	})
}

// elementSize bounds an element's attribute size (headers, padding, userdata).
func elementSize(e gnft.SetElement) int {
	return 64 + len(e.Key) + len(e.Val) + len(e.Comment)
}

func sendBuffer(size int) gnft.SockOption {
	return func(c *netlink.Conn) error {
		rc, err := c.SyscallConn()
		if err != nil {
			return err
		}
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, size)
		}); err != nil {
			return err
		}
		if serr != nil {
			// Without CAP_NET_ADMIN: as much as net.core.wmem_max allows.
			return c.SetWriteBuffer(size)
		}
		return nil
	}
}

// encodeOp returns the kernel elements for one op, laid out as nft does: every field of
// a concatenation starts on a 4-byte register boundary and is zero-padded to it;
// addresses, protocol numbers and ports are in network byte order. Intervals are a
// start element and an end element (flagged) holding the first address after the
// prefix.
func encodeOp(op elemOp) ([]gnft.SetElement, error) {
	switch op.mapName {
	case MapExposurePorts, MapReversePorts:
		key, err := portKey(op.key)
		if err != nil {
			return nil, err
		}
		e := gnft.SetElement{Key: key}
		if !op.del {
			if e.Val, err = portValue(op.value); err != nil {
				return nil, err
			}
			e.Comment = op.owner
		}
		return []gnft.SetElement{e}, nil
	case MapExposureAll, MapReverseAll:
		if len(op.key) != 1 {
			return nil, fmt.Errorf("%s key %q: want one address", op.mapName, op.key)
		}
		key, err := addr4(op.key[0])
		if err != nil {
			return nil, err
		}
		e := gnft.SetElement{Key: key}
		if !op.del {
			if len(op.value) != 1 {
				return nil, fmt.Errorf("%s value %q: want one address", op.mapName, op.value)
			}
			if e.Val, err = addr4(op.value[0]); err != nil {
				return nil, err
			}
			e.Comment = op.owner
		}
		return []gnft.SetElement{e}, nil
	case SetPeerSubnets:
		if len(op.key) != 1 {
			return nil, fmt.Errorf("%s key %q: want one prefix", op.mapName, op.key)
		}
		p, err := netip.ParsePrefix(op.key[0])
		if err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("%s: %q is not an IPv4 prefix", op.mapName, op.key[0])
		}
		p = p.Masked()
		start := p.Addr().As4()
		first := binary.BigEndian.Uint32(start[:])
		last := uint64(first) + (uint64(1) << (32 - p.Bits())) - 1
		if first == 0 || last == 1<<32-1 {
			return nil, errNeedsFull
		}
		end := binary.BigEndian.AppendUint32(nil, uint32(last+1))
		return []gnft.SetElement{{Key: start[:]}, {Key: end, IntervalEnd: true}}, nil
	}
	return nil, fmt.Errorf("unknown set %q", op.mapName)
}

// portKey encodes `ipv4_addr . inet_proto . inet_service`: 4 + 1(+3) + 2(+2) bytes.
func portKey(k []string) ([]byte, error) {
	if len(k) != 3 {
		return nil, fmt.Errorf("port map key %q: want address . protocol . port", k)
	}
	b, err := addr4(k[0])
	if err != nil {
		return nil, err
	}
	proto, ok := protocolNumbers[k[1]]
	if !ok {
		return nil, fmt.Errorf("port map key %q: protocol must be tcp or udp", k)
	}
	b = append(b, proto, 0, 0, 0)
	return appendPort(b, k[2])
}

// portValue encodes `ipv4_addr . inet_service`: 4 + 2(+2) bytes.
func portValue(v []string) ([]byte, error) {
	if len(v) != 2 {
		return nil, fmt.Errorf("port map value %q: want address . port", v)
	}
	b, err := addr4(v[0])
	if err != nil {
		return nil, err
	}
	return appendPort(b, v[1])
}

func appendPort(b []byte, s string) ([]byte, error) {
	port, err := strconv.ParseUint(s, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("port %q: %w", s, err)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(port))
	return append(b, 0, 0), nil
}

func addr4(s string) ([]byte, error) {
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return nil, fmt.Errorf("%q is not an IPv4 address", s)
	}
	b := a.As4()
	return b[:], nil
}
