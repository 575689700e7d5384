package mountinfo

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseReadsFieldsAfterOptionalOnes: the file system's fields are
// found after any number of optional fields, paths are unescaped, a line
// longer than a Scanner's token is read whole, and a short line is
// skipped.
func TestParseReadsFieldsAfterOptionalOnes(t *testing.T) {
	long := "/var/lib/containers/" + strings.Repeat("layer:", 20000)
	table := strings.Join([]string{
		`36 35 98:0 /mnt1 /mnt/with\040space rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue`,
		`40 30 0:35 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct`,
		`41 30 0:36 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw`,
		`50 30 0:40 / /merged rw - overlay overlay rw,lowerdir=` + long,
		`garbage line`,
	}, "\n")
	ms, err := Parse(strings.NewReader(table))
	require.NoError(t, err)
	require.Len(t, ms, 4)
	assert.Equal(t, Mount{Root: "/mnt1", Point: "/mnt/with space", FSType: "ext3", SuperOptions: "rw,errors=continue"}, ms[0])
	assert.True(t, ms[1].HasOption("cpu"))
	assert.False(t, ms[1].HasOption("cpuset"))
	assert.Equal(t, "/kubepods/pod1", ms[2].Root)
	assert.Equal(t, "cgroup2", ms[2].FSType)
	assert.Equal(t, "/merged", ms[3].Point)
	assert.Len(t, ms[3].SuperOptions, len("rw,lowerdir=")+len(long))
}

func TestUnescape(t *testing.T) {
	assert.Equal(t, "a b\tc\nd\\e", Unescape(`a\040b\011c\012d\134e`))
	assert.Equal(t, `plain\09`, Unescape(`plain\09`))
	assert.Equal(t, "/plain", Unescape("/plain"))
	assert.Equal(t, `/odd\04`, Unescape(`/odd\04`), "a cut escape is kept as it is")
}

// TestReadSelfHasTheRoot: this process's own table has a mount at "/".
func TestReadSelfHasTheRoot(t *testing.T) {
	if _, err := os.Stat(Self); err != nil {
		t.Skipf("no %s: %v", Self, err)
	}
	ms, err := Read(Self)
	require.NoError(t, err)
	var root bool
	for _, m := range ms {
		root = root || m.Point == "/"
	}
	assert.True(t, root, "no mount at / in %d mounts", len(ms))
}
