// Package envlabels derives the labels a containerdisk's environment gives
// its volume, the way CDI does: INSTANCETYPE_KUBEVIRT_IO_DEFAULT_PREFERENCE
// =fedora becomes instancetype.kubevirt.io/default-preference: fedora. The
// container-image source labels its volume with them (datasource's
// Labeler), and so does the node-pull server's GET /info (the binary's cdi package).
package envlabels

import "strings"

// marker is what a variable's name holds to become a label.
const marker = "KUBEVIRT_IO_"

// FromEnv returns the labels of the KEY=VALUE variables in env whose names
// hold KUBEVIRT_IO_, or nil when none does.
func FromEnv(env []string) map[string]string {
	out := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if !strings.Contains(k, marker) {
			continue
		}
		out[label(k)] = v
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// label turns a variable's name into its label: the part before the
// marker a dotted prefix of kubevirt.io, the part after it the name.
func label(k string) string {
	i := strings.Index(k, marker)
	prefix := strings.ToLower(strings.ReplaceAll(strings.TrimSuffix(k[:i], "_"), "_", "."))
	name := strings.ToLower(strings.ReplaceAll(k[i+len(marker):], "_", "-"))
	if prefix == "" {
		return "kubevirt.io/" + name
	}
	return prefix + ".kubevirt.io/" + name
}
