package format

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	"github.com/diskimport/engine/errdefs"
	"github.com/diskimport/engine/internal/testtar"
)

// FuzzOpenNotImage: whatever the bytes (tars of members of any kind, OVF
// descriptors, text, other magics), Open and a full read answer without
// panicking, an opened tar always names its member, and a refusal of a
// non-image is a NotImageError.
func FuzzOpenNotImage(f *testing.F) {
	disk := variedContent(64<<10, 18)[:4096] // small seeds: minimizing large ones takes the whole fuzz time
	f.Add(testtar.Build(f, []testtar.Member{testtar.File("disk.raw", disk)}))
	f.Add(testtar.Build(f, []testtar.Member{testtar.File("vm.ovf", ovfOf("d.vmdk")), testtar.File("d.vmdk", disk)}))
	f.Add(testtar.Build(f, []testtar.Member{testtar.File("a.txt", []byte("x y\n")), testtar.File("b", disk), testtar.File("c", disk)}))
	f.Add([]byte("<html><body>hello world</body></html>\n"))
	f.Add(append([]byte("BZh91AY&SY"), disk[:512]...))
	f.Add(append([]byte("PK\x03\x04"), disk[:512]...))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Open(context.Background(), bytes.NewReader(b), Options{MaxVirtualSize: 1 << 30})
		if err != nil {
			checkRefusal(t, err)
			return
		}
		defer s.Close()
		for _, c := range s.Compressions {
			if c == Tar && s.Member == "" {
				t.Fatal("a tar layer without a member name")
			}
		}
		// Bounded: a GNU sparse member of a few bytes may declare exabytes
		// of holes (the engine stops at the target's end).
		if _, err := io.CopyN(io.Discard, s, 16<<20); err != nil && err != io.EOF {
			checkRefusal(t, err)
		}
	})
}

func checkRefusal(t *testing.T, err error) {
	var ne *errdefs.NotImageError
	if errors.Is(err, errdefs.ErrTextNotImage) || errors.Is(err, errdefs.ErrNoDiskInArchive) || errors.Is(err, errdefs.ErrSeveralDisksInArchive) {
		if !errors.As(err, &ne) {
			t.Fatalf("a non-image refusal outside a NotImageError: %v", err)
		}
	}
}
