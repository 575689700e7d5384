package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/diskimport/engine/qemu"
)

// buildVersion and buildCommit are stamped by the linker (make build:
// -X main.buildVersion=... -X main.buildCommit=...). They are written once,
// at link time, and only read afterwards; an unstamped build (go build,
// go test) falls back to what the Go toolchain recorded about the build.
var (
	buildVersion string
	buildCommit  string
)

// qemuImgVersionTimeout bounds `qemu-img --version`, so a broken qemu-img
// cannot hang `importer --version`.
const qemuImgVersionTimeout = 10 * time.Second

// versionInfo is what `importer --version` prints.
type versionInfo struct {
	Version string
	Commit  string
	Go      string
	QemuImg string
}

// addVersion gives root a `version` subcommand and a `--version` flag that
// print versionInfo. The flag is checked before root's own RunE runs.
func addVersion(ctx context.Context, root *cobra.Command, stdout io.Writer) {
	print := func() error {
		_, err := io.WriteString(stdout, currentVersion(ctx).String())
		return err
	}
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the importer's version, commit, Go version and qemu-img version",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return print() },
	})
	asked := root.Flags().Bool("version", false, "print the importer's version, commit, Go version and qemu-img version")
	inner := root.RunE
	root.RunE = func(cmd *cobra.Command, args []string) error {
		if *asked {
			return print()
		}
		return inner(cmd, args)
	}
}

// currentVersion collects the versions of this binary and of the
// qemu-img found on PATH.
func currentVersion(ctx context.Context) versionInfo {
	v := versionInfo{Version: buildVersion, Commit: buildCommit, Go: runtime.Version(), QemuImg: qemuImgVersion(ctx)}
	if info, ok := debug.ReadBuildInfo(); ok {
		if v.Version == "" {
			v.Version = info.Main.Version
		}
		if v.Commit == "" {
			v.Commit = buildSetting(info, "vcs.revision")
			if v.Commit != "" && buildSetting(info, "vcs.modified") == "true" {
				v.Commit += "-dirty"
			}
		}
	}
	if v.Version == "" {
		v.Version = "unknown"
	}
	if v.Commit == "" {
		v.Commit = "unknown"
	}
	return v
}

func (v versionInfo) String() string {
	return fmt.Sprintf("importer %s\ncommit   %s\ngo       %s\nqemu-img %s\n", v.Version, v.Commit, v.Go, v.QemuImg)
}

func buildSetting(info *debug.BuildInfo, key string) string {
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// qemuImgVersion is the version of the qemu-img found on PATH, or why
// there is none.
func qemuImgVersion(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, qemuImgVersionTimeout)
	defer cancel()
	v, err := (&qemu.Runner{}).Version(ctx)
	if err != nil {
		return fmt.Sprintf("unavailable (%v)", err)
	}
	return v
}
