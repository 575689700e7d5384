package datasource

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/diskimport/engine/errdefs"
)

// EgressPolicy is the set of networks a network source (HTTP(S), S3, GCS,
// a registry) may connect to. It is checked on the address actually
// connected to: DialContext resolves the host once, refuses the whole
// connection when any address it resolved to is denied, and connects only
// to an address it checked, so a DNS answer that changes between the check
// and the connection cannot reach a denied network. Every connection is
// checked, the first request's and every redirect's. Through a proxy, the
// connection is to the proxy, so the proxy's address is what is checked; a
// literal target address is checked too before the request is handed to
// the proxy, while a target named by host name is resolved by the proxy.
// A literal address is any spelling hostAddr takes for one (inet_aton's
// 2852039166, 0xa9fea9fe, octal, 169.254.43518, a trailing dot), as the
// proxies and resolvers that would connect to it do.
type EgressPolicy struct {
	// Allow, when not empty, lists the only networks a connection may
	// reach.
	Allow []netip.Prefix
	// Deny lists networks no connection may reach; it wins over Allow.
	Deny []netip.Prefix
	// Resolver resolves host names; nil is net.DefaultResolver.
	Resolver *net.Resolver
	// Dialer makes the connections (timeouts, keep-alive, local address);
	// nil is a net.Dialer with 30 s timeouts. Its Control, if any, runs
	// after the policy's own check of the address.
	Dialer *net.Dialer
}

// nat64 is the well-known NAT64 prefix (RFC 6052): 64:ff9b::a9fe:a9fe
// reaches 169.254.169.254 through a NAT64 gateway, so the IPv4 address
// embedded in its last 32 bits is checked too.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// DefaultEgressDeny is CDI env mode's deny list: IPv4 and IPv6 link-local
// networks (169.254.169.254, the metadata service of AWS, GCP, Azure and
// OpenStack, is in the first) and AWS's IPv6 metadata address.
func DefaultEgressDeny() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("fe80::/10"),
		netip.MustParsePrefix("fd00:ec2::254/128"),
	}
}

// ParseEgressList reads networks as CIDRs or single addresses, separated
// by commas or white space, from every item. The word "default" stands for
// DefaultEgressDeny and "none" for nothing (an empty, non-nil list).
func ParseEgressList(items ...string) ([]netip.Prefix, error) {
	out := []netip.Prefix{}
	for _, item := range items {
		for _, f := range strings.FieldsFunc(item, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
			switch strings.ToLower(f) {
			case "none":
				continue
			case "default":
				out = append(out, DefaultEgressDeny()...)
				continue
			}
			p, err := parseNetwork(f)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

// parseNetwork reads a CIDR or an address (a /32 or /128). An
// IPv4-mapped IPv6 network is stored as the IPv4 network it maps, since
// addresses are unmapped before they are checked.
func parseNetwork(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("egress network %q is neither a CIDR nor an IP address: %w", s, errdefs.ErrInvalidOptions)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}

// Check returns nil when a connection may reach addr, else an
// *errdefs.EgressError naming addr and the rule.
func (p *EgressPolicy) Check(addr netip.Addr) error {
	if rule := p.rule(addr); rule != "" {
		return &errdefs.EgressError{Addr: addr.String(), Rule: rule}
	}
	return nil
}

// rule is the rule refusing addr, "" when none does. The unspecified
// address is always refused: connecting to 0.0.0.0 or :: reaches this
// host on Linux.
func (p *EgressPolicy) rule(addr netip.Addr) string {
	a := addr.Unmap().WithZone("")
	if a.IsUnspecified() {
		return "the unspecified address reaches this host"
	}
	candidates := []netip.Addr{a}
	if nat64.Contains(a) {
		b := a.As16()
		candidates = append(candidates, netip.AddrFrom4([4]byte(b[12:])))
	}
	for _, c := range candidates {
		for _, d := range p.Deny {
			if d.Contains(c) {
				return "deny " + d.String()
			}
		}
	}
	if len(p.Allow) > 0 && !slices.ContainsFunc(p.Allow, func(n netip.Prefix) bool { return n.Contains(a) }) {
		names := make([]string, len(p.Allow))
		for i, n := range p.Allow {
			names[i] = n.String()
		}
		return "not in allow list " + strings.Join(names, ",")
	}
	return ""
}

func (p *EgressPolicy) resolver() *net.Resolver {
	if p.Resolver == nil {
		return net.DefaultResolver
	}
	return p.Resolver
}

// dialer is a copy of the caller's dialer (or the default one) whose
// Control checks the literal address being connected before the caller's
// Control runs: the last gate, whatever the address came from.
func (p *EgressPolicy) dialer() *net.Dialer {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	if p.Dialer != nil {
		c := *p.Dialer
		d = &c
	}
	next := d.Control
	d.Control = func(network, address string, c syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("egress policy: connecting to %q, not an IP address: %w", address, errdefs.ErrEgressDenied)
		}
		if err := p.Check(ap.Addr()); err != nil {
			return err
		}
		if next != nil {
			return next(network, address, c)
		}
		return nil
	}
	return d
}

// lookup resolves a host name to its addresses, IPv4 ones as IPv4 (Go's
// resolver may return them IPv4-mapped); an address in any spelling
// hostAddr takes is that address, never a name to resolve.
func (p *EgressPolicy) lookup(ctx context.Context, family, host string) ([]netip.Addr, error) {
	if a, ok := hostAddr(host); ok {
		return []netip.Addr{a}, nil
	}
	addrs, err := p.resolver().LookupNetIP(ctx, family, host)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no address", Name: host, IsNotFound: true}
	}
	for i, a := range addrs {
		addrs[i] = a.Unmap()
	}
	return addrs, nil
}

// DialContext connects to address (host:port) when the policy allows
// every address the host resolves to. The host is resolved once, and the
// connection is made to the checked addresses in the resolver's order.
func (p *EgressPolicy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, portName, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("egress policy: %w", err)
	}
	port, err := strconv.ParseUint(portName, 10, 16)
	if err != nil {
		n, lerr := p.resolver().LookupPort(ctx, network, portName)
		if lerr != nil {
			return nil, fmt.Errorf("egress policy: port %q: %w", portName, lerr)
		}
		port = uint64(n)
	}
	family := "ip"
	switch network {
	case "tcp4", "udp4":
		family = "ip4"
	case "tcp6", "udp6":
		family = "ip6"
	}
	addrs, err := p.lookup(ctx, family, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if rule := p.rule(a); rule != "" {
			return nil, &errdefs.EgressError{Host: host, Addr: a.String(), Rule: rule}
		}
	}
	d := p.dialer()
	var last error
	for _, a := range addrs {
		conn, err := d.DialContext(ctx, network, netip.AddrPortFrom(a.Unmap(), uint16(port)).String())
		if err == nil {
			return conn, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

// proxy wraps a transport's proxy choice: a request to a literal address
// that is denied is refused before it is handed to a proxy (which would
// connect to it unchecked). A proxy's own address is checked when it is
// dialled.
func (p *EgressPolicy) proxy(next func(*http.Request) (*url.URL, error)) func(*http.Request) (*url.URL, error) {
	return func(r *http.Request) (*url.URL, error) {
		u, err := next(r)
		if err != nil || u == nil {
			return u, err
		}
		if a, ok := hostAddr(r.URL.Hostname()); ok {
			if rule := p.rule(a); rule != "" {
				return nil, &errdefs.EgressError{Host: r.URL.Hostname(), Addr: a.String(), Rule: rule + ", asked of proxy " + u.Redacted()}
			}
		}
		return u, nil
	}
}
