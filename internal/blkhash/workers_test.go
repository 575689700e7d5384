package blkhash

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkersFollowGOMAXPROCS: a Hash and an Assembler asked for the
// default hash on as many goroutines as Go may run at once, GOMAXPROCS,
// which Go sets from the cgroup's CPU limit (CFS quota or cpu.max), not
// on the node's cores.
func TestWorkersFollowGOMAXPROCS(t *testing.T) {
	was := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(was)
	for _, procs := range []int{1, 3} {
		runtime.GOMAXPROCS(procs)
		require.Equal(t, procs, New(0).workers)
		require.Equal(t, procs, NewAssembler(0).workers)
	}
	require.Equal(t, 5, New(5).workers, "a count asked for is kept")
}
