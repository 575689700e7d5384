package cdi

import "os"

// Paths are the fixed paths of CDI's importer pod.
type Paths struct {
	// BlockDevice is where the controller puts a block-mode volume; when it
	// exists, it is the target.
	BlockDevice string
	// DataDir is where a filesystem-mode volume is mounted; DataFile, the
	// disk image in it, is the target, and an archive is extracted into
	// DataDir itself.
	DataDir  string
	DataFile string
	// Scratch is the scratch volume the controller mounts (see scratchDir).
	Scratch string
	// TerminationLog receives the termination message.
	TerminationLog string
	// ExtraHeaders holds one directory per secret of extra HTTP headers
	// (/extraheaders/<n>/), one header line per file (headerFiles).
	ExtraHeaders string
	// ProxyCerts is where the controller mounts the CA certificates of the
	// cluster's proxy when IMPORTER_PROXY_CERT_DIR does not say (CDI's own
	// importer reads only this path).
	ProxyCerts string
}

// PathsFromEnv returns CDI's paths. IMPORTER_PATH_PREFIX, when set, is put
// in front of each, so the contract can be exercised without owning /data
// and /dev (tests, or a person trying it as non-root).
func PathsFromEnv(getenv func(string) string) Paths {
	prefix := getenv("IMPORTER_PATH_PREFIX")
	return Paths{
		BlockDevice:    prefix + "/dev/cdi-block-volume",
		DataDir:        prefix + "/data",
		DataFile:       prefix + "/data/disk.img",
		Scratch:        prefix + "/scratch",
		TerminationLog: prefix + "/dev/termination-log",
		ExtraHeaders:   prefix + "/extraheaders",
		ProxyCerts:     prefix + "/proxycerts",
	}
}

// blockMode reports whether the volume is a block device: CDI's controller
// maps it at BlockDevice and mounts nothing at DataDir.
func (p Paths) blockMode() bool {
	_, err := os.Stat(p.BlockDevice)
	return err == nil
}
