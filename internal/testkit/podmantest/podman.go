// Package podmantest runs real containers with podman for tests: the
// runtime flags this kind of machine needs (runc, cgroupfs, fixed
// ulimits), images loaded from a docker-archive, and containers, pods and
// volumes removed when the test ends, whether it passed or not.
//
// Tests skip when podman cannot run here (not installed, not root, or
// `podman info` fails) unless DISKIMPORT_REQUIRE_PODMAN=1, which CI sets:
// there a skip would hide a broken setup, so it fails instead.
package podmantest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RequireEnv names the variable that turns "cannot run podman" from a
// skip into a failure.
const RequireEnv = "DISKIMPORT_REQUIRE_PODMAN"

// commandTimeout bounds each podman command but run (which has its own).
const commandTimeout = 5 * time.Minute

// globalFlags are given to every podman command: Debian 12's podman with
// runc and cgroupfs works on machines without systemd or crun.
func globalFlags() []string {
	return []string{"--runtime", "runc", "--cgroup-manager", "cgroupfs"}
}

// containersConf is the containers.conf every podman command reads
// (CONTAINERS_CONF): runc fails to set podman's default nofile and nproc
// limits on this kind of machine, even to the values the host has, so
// lower ones are the default for every container, pod infra containers
// and `podman kube play` included.
const containersConf = `[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
`

// Podman runs podman commands for one test.
type Podman struct {
	t    testing.TB
	bin  string
	conf string // the containers.conf file
}

// New returns a Podman for t, or skips t (fails it under RequireEnv)
// when podman cannot run here.
func New(t testing.TB) *Podman {
	t.Helper()
	bin, err := exec.LookPath("podman")
	if err != nil {
		unavailable(t, "podman is not installed (apt-get install podman runc): %v", err)
	}
	if os.Geteuid() != 0 {
		unavailable(t, "podman tests run as root (containers/storage, loop devices)")
	}
	p := &Podman{t: t, bin: bin, conf: filepath.Join(t.TempDir(), "containers.conf")}
	if err := os.WriteFile(p.conf, []byte(containersConf), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := p.output("info", "--format", "{{.Store.GraphDriverName}}"); err != nil {
		unavailable(t, "podman info failed: %v\n%s", err, out)
	}
	return p
}

func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf(format+" ("+RequireEnv+"=1: podman must run here)", args...)
	}
	t.Skipf(format, args...)
}

// Output runs `podman ARGS...` and returns its standard output; it fails
// the test on error.
func (p *Podman) Output(args ...string) string {
	p.t.Helper()
	out, err := p.output(args...)
	if err != nil {
		p.t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Try runs `podman ARGS...` and returns its output and error, for
// commands that may fail (cleanup of what may not exist).
func (p *Podman) Try(args ...string) (string, error) {
	return p.output(args...)
}

func (p *Podman) output(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := p.Command(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String() + stderr.String(), err
	}
	return stdout.String(), nil
}

// Load loads a docker-archive and returns the ID podman gives the image
// ref names in it (the config's digest without "sha256:").
func (p *Podman) Load(archive, ref string) string {
	p.t.Helper()
	p.Output("load", "-q", "-i", archive)
	return strings.TrimSpace(p.Output("image", "inspect", "--format", "{{.Id}}", ref))
}

// Command returns podman with the global flags and args, for a test that
// needs to run it itself (e.g. to watch it while it runs).
func (p *Podman) Command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, p.bin, append(globalFlags(), args...)...)
	cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+p.conf)
	return cmd
}

// uniqueName is a container or pod name no other test uses.
func uniqueName(t testing.TB, prefix string) string {
	name := strings.NewReplacer("/", "-", " ", "-", "#", "-").Replace(t.Name())
	return fmt.Sprintf("%s-%s-%d", prefix, strings.ToLower(name), time.Now().UnixNano())
}
