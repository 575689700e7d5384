package sandbox

import (
	"encoding/json"
	"fmt"
)

// policyEnv carries the JSON policy from the parent to the re-executed
// child. Its presence is what turns a process into a sandbox launcher.
const policyEnv = "DISKIMPORT_SANDBOX_POLICY"

// ChildFailedExit is the exit status of a child that could not set up the
// sandbox; its stderr then starts with childErrorPrefix.
const ChildFailedExit = 125

// childErrorPrefix starts the child's stderr line when setup fails, so the
// parent can tell a sandbox failure from one of the program.
const childErrorPrefix = "diskimport sandbox: "

// Policy is everything the child needs: the program and its environment,
// the resource limits, and what the program may open.
type Policy struct {
	// Program is the absolute path of the binary to exec; Args are its
	// arguments after argv[0].
	Program string   `json:"program"`
	Args    []string `json:"args"`
	// Env is the program's whole environment (nothing is inherited).
	Env []string `json:"env"`
	// AddressSpace (bytes) and CPUSeconds set RLIMIT_AS and RLIMIT_CPU,
	// soft and hard alike; 0 leaves a limit unchanged.
	AddressSpace uint64 `json:"as"`
	CPUSeconds   uint64 `json:"cpu"`
	// OpenFiles sets RLIMIT_NOFILE: descriptors numbered below it only.
	OpenFiles uint64 `json:"nofile,omitempty"`
	// Processes sets RLIMIT_NPROC. The kernel counts every process and
	// thread of the user (on a node, every pod running as that uid), so 1
	// means "no new thread or process" and larger values are not a count
	// of the program's own; root is not limited by it at all.
	Processes uint64 `json:"nproc,omitempty"`
	// LoadProgram grants what starting Program takes: the program, its
	// interpreter and the shared libraries the interpreter resolves for it
	// (read and execute), and the loader's cache (read). The launcher asks
	// the interpreter (SharedLibraries) before it restricts itself.
	LoadProgram bool `json:"load_program,omitempty"`
	// Rules grant filesystem access; everything else is denied, as are
	// TCP (and, on newer kernels, UDP) bind and connect, abstract Unix
	// sockets and signals to processes outside the sandbox.
	Rules []Rule `json:"rules"`
	// Landlock false runs the program with the limits only (tests compare
	// confined and unconfined runs with it; Launch also clears it when the
	// kernel has no Landlock).
	Landlock bool `json:"landlock"`
}

// Rule grants access to one path: a file (or device, or socket) or, with
// Dir, the whole hierarchy below a directory.
type Rule struct {
	Path  string `json:"path"`
	Read  bool   `json:"read,omitempty"`  // open for reading
	Write bool   `json:"write,omitempty"` // open for writing, truncate
	Exec  bool   `json:"exec,omitempty"`  // execve (the program, the dynamic loader)
	Dir   bool   `json:"dir,omitempty"`   // a directory hierarchy: also list directories
	// Ioctl allows device ioctls (block devices: size, sector size,
	// discard, zero-out); Landlock otherwise denies them on device files.
	Ioctl bool `json:"ioctl,omitempty"`
	// Connect allows connecting to the Unix socket at Path (kernels whose
	// Landlock restricts pathname sockets; older ones never restrict them).
	Connect bool `json:"connect,omitempty"`
	// Optional skips the rule when Path does not exist (system paths that
	// differ between distributions).
	Optional bool `json:"optional,omitempty"`
}

func (p *Policy) encode() (string, error) {
	b, err := json.Marshal(p)
	if err != nil {
		return "", fmt.Errorf("encoding sandbox policy: %w", err)
	}
	return string(b), nil
}

func decodePolicy(s string) (*Policy, error) {
	var p Policy
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return nil, fmt.Errorf("decoding sandbox policy: %w", err)
	}
	if p.Program == "" {
		return nil, fmt.Errorf("sandbox policy names no program")
	}
	return &p, nil
}

// pipeFilterOpenFiles is a pipe filter's RLIMIT_NOFILE: its three standard
// streams and the one descriptor at a time the loader opens libraries on.
const pipeFilterOpenFiles = 16

// PipeFilter is the policy of a program that opens no file at all (a
// decompressor): it reads its standard input and writes its standard
// output, descriptors it inherits, which Landlock does not check; it may
// load its own shared libraries and nothing else, exec nothing but itself,
// bind or connect no TCP socket, reach no abstract Unix socket and signal
// no process outside its sandbox. Landlock is on whenever the kernel has
// it. The caller adds the limits that depend on the program (address
// space, processes).
func PipeFilter(program string, args, env []string) *Policy {
	return &Policy{
		Program:     program,
		Args:        args,
		Env:         env,
		OpenFiles:   pipeFilterOpenFiles,
		LoadProgram: true,
		Landlock:    ABI() > 0,
	}
}
