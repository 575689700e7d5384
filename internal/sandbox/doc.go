// Package sandbox starts every program the engine runs (qemu-img, the xz
// and igzip decompressors) confined to what it needs, with resource
// limits, because each of them parses bytes an attacker may have crafted.
// Start is the one launcher.
//
// The parent builds a Policy and starts its own executable (/proc/self/exe)
// with the policy in an environment variable. An init function in this
// package, which therefore runs in every binary that links the engine (our
// importer, a library user's binary, a go test binary), sees the variable
// before main runs: it asks the program's loader which libraries it maps
// (LoadProgram), creates a Landlock ruleset from the policy, restricts its
// own thread with it, sets the resource limits and execs the real program
// in place. Landlock domains and resource limits survive execve, so both
// hold from the program's first instruction; the program needs no
// privilege and no helper binary.
//
// Only the exec'ing thread is restricted: execve ends every other thread of
// the process, so nothing unrestricted survives into the program, and the
// engine does not depend on restricting all Go threads at once.
//
// Every program runs in a process group of its own, dies with the engine
// (Pdeathsig) and, whole group, with its context.
//
// Where the kernel has no Landlock (or it is disabled), the program runs
// with the resource limits only; Describe says which of the two is in force.
// A failure to apply a ruleset the kernel supports is fatal for the child
// (exit status ChildFailedExit): the program never runs less confined than
// reported.
package sandbox
