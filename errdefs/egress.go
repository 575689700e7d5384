package errdefs

import (
	"errors"
	"fmt"
)

// ErrEgressDenied: the egress policy forbids the address a source would
// connect to (the metadata service, a link-local or other denied network).
// An EgressError carrying it also matches ErrSourceRefused, so no retry
// is made: the same address is refused every time.
var ErrEgressDenied = errors.New("egress policy denies the address")

// EgressError names the refused connection: the host asked for, the
// address it resolved to, and the rule that refused it.
type EgressError struct {
	Host string // host[:port] as asked for (a name or a literal address)
	Addr string // the resolved address that was refused
	Rule string // e.g. "deny 169.254.0.0/16", "not in allow list 10.0.0.0/8"
}

func (e *EgressError) Error() string {
	if e.Host == "" || e.Host == e.Addr {
		return fmt.Sprintf("%v: %s (%s)", ErrEgressDenied, e.Addr, e.Rule)
	}
	return fmt.Sprintf("%v: %s resolves to %s (%s)", ErrEgressDenied, e.Host, e.Addr, e.Rule)
}

// Is makes errors.Is true for ErrEgressDenied and ErrSourceRefused.
func (e *EgressError) Is(target error) bool {
	return target == ErrEgressDenied || target == ErrSourceRefused
}
