package main

import (
	"fmt"

	"github.com/spf13/pflag"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
)

// addEgressFlags adds the egress policy of network sources. The command
// line has none unless one of them is given: a person at a terminal may
// fetch from anywhere they can reach themselves (env mode's defaults are
// for pods whose endpoint someone else chose).
func addEgressFlags(fl *pflag.FlagSet, f *cliFlags) {
	fl.StringArrayVar(&f.egressAllow, "egress-allow", nil, "networks (CIDR or address, comma-separated; repeatable) the only ones a network source may connect to")
	fl.StringArrayVar(&f.egressDeny, "egress-deny", nil, "networks (CIDR or address, comma-separated; repeatable) no network source may connect to, even if allowed; 'default' is env mode's list (169.254.0.0/16, fe80::/10, fd00:ec2::254)")
}

// egress is the policy the egress flags ask for, nil without them.
func (f *cliFlags) egress() (*importer.EgressPolicy, error) {
	if len(f.egressAllow) == 0 && len(f.egressDeny) == 0 {
		return nil, nil
	}
	var p importer.EgressPolicy
	var err error
	if p.Allow, err = datasource.ParseEgressList(f.egressAllow...); err != nil {
		return nil, fmt.Errorf("--egress-allow: %w", err)
	}
	if p.Deny, err = datasource.ParseEgressList(f.egressDeny...); err != nil {
		return nil, fmt.Errorf("--egress-deny: %w", err)
	}
	return &p, nil
}
