// Package sandbox starts a program (qemu-img) confined to the files it was
// given, with resource limits, for images that may have been crafted by an
// attacker.
//
// The parent builds a Policy and starts its own executable (/proc/self/exe)
// with the policy in an environment variable. An init function in this
// package, which therefore runs in every binary that links the engine (our
// importer, a library user's binary, a go test binary), sees the variable
// before main runs: it creates a Landlock ruleset from the policy, restricts
// its own thread with it, sets RLIMIT_AS and RLIMIT_CPU and execs the real
// program in place. Landlock domains and resource limits survive execve, so
// both hold from the program's first instruction; the program needs no
// privilege and no helper binary (util-linux prlimit is no longer used).
//
// Only the exec'ing thread is restricted: execve ends every other thread of
// the process, so nothing unrestricted survives into the program, and the
// engine does not depend on restricting all Go threads at once.
//
// Where the kernel has no Landlock (or it is disabled), the program runs
// with the resource limits only; Describe says which of the two is in force.
// A failure to apply a ruleset the kernel supports is fatal for the child
// (exit status ChildFailedExit): the program never runs less confined than
// reported.
package sandbox
