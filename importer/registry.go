package importer

import (
	"context"
	"fmt"
	"maps"

	"github.com/diskimport/engine/datasource"
	"github.com/diskimport/engine/errdefs"
)

// registryOptions picks the options a container-image source uses.
func registryOptions(o Options) datasource.RegistryOptions {
	return datasource.RegistryOptions{
		Username:        o.Username,
		Password:        o.Password,
		AuthFile:        o.AuthFile,
		CertDir:         o.CertDir,
		InsecureTLS:     o.InsecureTLS,
		Arch:            o.Arch,
		RegistriesConf:  o.RegistriesConf,
		TempDir:         o.ScratchDir,
		Retries:         o.Retries,
		RetryBackoff:    o.RetryBackoff,
		RetryMaxElapsed: o.RetryMaxElapsed,
		Logger:          o.Logger,
	}
}

// ResolveDigest returns the manifest digest a container-image reference
// (docker://, oci-archive:, oci:) resolves to, reading no layer: for a
// multi-platform image, the index's digest. A poller (CDI's DataImportCron)
// compares it with the last import to decide whether to import again.
// Only the registry fields of o (and Logger) are used.
func ResolveDigest(ctx context.Context, source string, o Options) (string, error) {
	if !datasource.IsRegistryRef(source) {
		return "", fmt.Errorf("%q is not a container image reference (docker://, oci-archive:, oci:): %w", source, errdefs.ErrInvalidOptions)
	}
	return datasource.ResolveDigest(ctx, source, registryOptions(o))
}

// takeSourceLabels copies labels a source derives from its image (the
// KUBEVIRT_IO_ env vars of a containerdisk) into the result.
func (j *job) takeSourceLabels() {
	l, ok := j.source.(datasource.Labeler)
	if !ok {
		return
	}
	labels := l.Labels()
	if len(labels) == 0 {
		return
	}
	if j.result.Labels == nil {
		j.result.Labels = map[string]string{}
	}
	maps.Copy(j.result.Labels, labels)
}
