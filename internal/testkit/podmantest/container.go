package podmantest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Container is what one `podman run` is given.
type Container struct {
	Image      string
	Entrypoint string   // replaces the image's entrypoint when set
	Args       []string // after the image name
	Env        []string // KEY=VALUE
	Volumes    []string // HOST:CONTAINER[:OPTIONS]
	Devices    []string // HOST[:CONTAINER]
	User       string   // UID[:GID]; the image's user when empty
	Groups     []string // supplementary groups (a pod's fsGroup)
	HostNet    bool     // --network host: reach servers on the host's 127.0.0.1
	Pod        string   // join this pod (its network, as a Kubernetes pod's containers share one)
	CapDropAll bool     // --cap-drop all, as a restricted pod runs
	ReadOnly   bool     // --read-only (podman puts a tmpfs on /tmp), as readOnlyRootFilesystem
	Extra      []string // any other podman run flags
}

// Result is how a container ended.
type Result struct {
	ExitCode       int
	Stdout, Stderr string
}

func (c Container) runArgs(name string) []string {
	args := []string{"run", "--name", name}
	if c.Entrypoint != "" {
		args = append(args, "--entrypoint", c.Entrypoint)
	}
	for _, e := range c.Env {
		args = append(args, "--env", e)
	}
	for _, v := range c.Volumes {
		args = append(args, "--volume", v)
	}
	for _, d := range c.Devices {
		args = append(args, "--device", d)
	}
	if c.User != "" {
		args = append(args, "--user", c.User)
	}
	for _, g := range c.Groups {
		args = append(args, "--group-add", g)
	}
	if c.HostNet {
		args = append(args, "--network", "host")
	}
	if c.Pod != "" {
		args = append(args, "--pod", c.Pod)
	}
	if c.CapDropAll {
		args = append(args, "--cap-drop", "all", "--security-opt", "no-new-privileges")
	}
	if c.ReadOnly {
		args = append(args, "--read-only")
	}
	args = append(args, c.Extra...)
	return append(append(args, c.Image), c.Args...)
}

// Run runs c to its end (or until timeout, then it is killed) and
// returns how it ended. The container is removed when the test ends.
func (p *Podman) Run(c Container, timeout time.Duration) Result {
	p.t.Helper()
	name := uniqueName(p.t, "run")
	p.removeAtCleanup("rm", "--force", "--time", "0", name)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := p.Command(ctx, c.runArgs(name)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := Result{Stdout: stdout.String(), Stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		p.t.Fatalf("container %s did not end within %v\nstdout:\n%s\nstderr:\n%s", name, timeout, r.Stdout, r.Stderr)
	case errors.As(err, &exit):
		r.ExitCode = exit.ExitCode()
	case err != nil:
		p.t.Fatalf("podman run: %v\n%s", err, r.Stderr)
	}
	return r
}

// Start runs c in the background and returns its name; the container is
// stopped and removed when the test ends.
func (p *Podman) Start(c Container) string {
	p.t.Helper()
	name := uniqueName(p.t, "bg")
	p.removeAtCleanup("rm", "--force", "--time", "0", name)
	args := c.runArgs(name)
	args = append([]string{args[0], "--detach"}, args[1:]...)
	p.Output(args...)
	return name
}

// Wait waits for a started container to end and returns its exit code.
func (p *Podman) Wait(name string) int {
	p.t.Helper()
	return p.WaitWithin(name, commandTimeout)
}

// WaitWithin is Wait bounded by timeout: a container still running then
// fails the test, with its logs.
func (p *Podman) WaitWithin(name string, timeout time.Duration) int {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := p.Command(ctx, "wait", name)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		p.t.Fatalf("%s still runs after %v\n%s", name, timeout, p.Logs(name))
	}
	out := strings.TrimSpace(stdout.String())
	code, convErr := strconv.Atoi(out)
	if err != nil || convErr != nil {
		p.t.Fatalf("podman wait %s: %v %q %s", name, err, out, stderr.String())
	}
	return code
}

// IP is a started container's address on podman's bridge network, where
// the host and the other containers reach it (a pod's IP).
func (p *Podman) IP(name string) string {
	p.t.Helper()
	ip := strings.TrimSpace(p.Output("inspect", "--format", "{{.NetworkSettings.IPAddress}}", name))
	if ip == "" {
		p.t.Fatalf("container %s has no address on podman's network", name)
	}
	return ip
}

// Logs returns a container's standard output and error, for messages.
func (p *Podman) Logs(name string) string {
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := p.Command(ctx, "logs", name).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s(podman logs %s: %v)", out, name, err)
	}
	return string(out)
}

// removeAtCleanup runs a podman command that removes something when the
// test ends, reporting (not ignoring) a failure.
func (p *Podman) removeAtCleanup(args ...string) {
	p.t.Cleanup(func() {
		if out, err := p.output(args...); err != nil && !strings.Contains(out, "no such") {
			p.t.Errorf("cleanup: podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
}

// Pod creates an empty pod (with host networking when hostNet) whose
// containers share a network namespace, and removes it with everything
// in it when the test ends.
func (p *Podman) Pod(hostNet bool) string {
	p.t.Helper()
	name := uniqueName(p.t, "pod")
	p.removeAtCleanup("pod", "rm", "--force", "--time", "0", name)
	args := []string{"pod", "create", "--name", name}
	if hostNet {
		args = append(args, "--network", "host")
	}
	p.Output(args...)
	return name
}
