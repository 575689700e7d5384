package datasource

import (
	"net/netip"
	"strings"
)

// hostAddr reports whether host (a URL's host name, brackets allowed) is
// an IP address, and which, by the rules of those who may connect to it:
// a proxy (Squid, curl) or a system resolver parses IPv4 the inet_aton
// way, so 2852039166, 0xa9fea9fe, 0251.0376.0251.0376 and 169.254.43518
// all reach 169.254.169.254, as does 169.254.169.254. with its trailing
// dot. Every such spelling is an address for the egress policy, checked
// as one; a host that is not one is a name, resolved (directly) or left
// to the proxy.
func hostAddr(host string) (netip.Addr, bool) {
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		return a, true
	}
	// Trailing dots name the root zone; 169.254.169.254. is the address.
	host = strings.TrimRight(host, ".")
	if a, err := netip.ParseAddr(host); err == nil {
		return a, true
	}
	return parseInetAton(host)
}

// parseInetAton parses s as inet_aton(3) does: one to four parts
// separated by dots, each decimal, octal (a leading 0) or hexadecimal (a
// leading 0x or 0X); every part but the last is one byte, the last fills
// the bytes left (a.b.c.d, a.b.c with c of 16 bits, a.b with b of 24
// bits, a alone of 32 bits).
func parseInetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var b [4]byte
	for i, p := range parts {
		v, ok := atonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if v > 0xff {
				return netip.Addr{}, false
			}
			b[i] = byte(v)
			continue
		}
		// The last part fills bytes i..3.
		rest := 4 - i
		if rest < 4 && v >= 1<<(8*rest) {
			return netip.Addr{}, false
		}
		for k := 3; k >= i; k-- {
			b[k] = byte(v)
			v >>= 8
		}
	}
	return netip.AddrFrom4(b), true
}

// atonPart is one part's value, at most 32 bits.
func atonPart(p string) (uint64, bool) {
	base := uint64(10)
	switch {
	case len(p) >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'):
		base, p = 16, p[2:]
		if p == "" {
			return 0, true // inet_aton takes "0x" alone as 0
		}
	case len(p) > 1 && p[0] == '0':
		base, p = 8, p[1:]
	case p == "":
		return 0, false
	}
	var v uint64
	for i := 0; i < len(p); i++ {
		c := p[i]
		var d uint64
		switch {
		case c >= '0' && c <= '9':
			d = uint64(c - '0')
		case base == 16 && c >= 'a' && c <= 'f':
			d = uint64(c-'a') + 10
		case base == 16 && c >= 'A' && c <= 'F':
			d = uint64(c-'A') + 10
		default:
			return 0, false
		}
		if d >= base {
			return 0, false
		}
		if v = v*base + d; v > 0xffffffff {
			return 0, false
		}
	}
	return v, true
}
