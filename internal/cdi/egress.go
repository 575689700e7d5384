package cdi

import (
	"fmt"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/importer"
)

// egressPolicy is the pod's egress policy: whoever may create a DataVolume
// chooses the endpoint, so by default an importer pod may not reach the
// node's link-local networks or the cloud's metadata service.
// IMPORTER_EGRESS_DENY replaces that deny list ("none": deny nothing,
// "default" stands for it inside a list); IMPORTER_EGRESS_ALLOW, when set,
// is the only networks a source may reach. Both are CIDRs or addresses
// separated by commas.
func egressPolicy(getenv func(string) string) (*importer.EgressPolicy, error) {
	p := &importer.EgressPolicy{Deny: datasource.DefaultEgressDeny()}
	var err error
	if v := getenv("IMPORTER_EGRESS_DENY"); v != "" {
		if p.Deny, err = datasource.ParseEgressList(v); err != nil {
			return nil, fmt.Errorf("IMPORTER_EGRESS_DENY: %w", err)
		}
	}
	if v := getenv("IMPORTER_EGRESS_ALLOW"); v != "" {
		if p.Allow, err = datasource.ParseEgressList(v); err != nil {
			return nil, fmt.Errorf("IMPORTER_EGRESS_ALLOW: %w", err)
		}
	}
	return p, nil
}
