package hostileimg

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func qemuConvert(t *testing.T, img, fmtName string) ([]byte, error) {
	t.Helper()
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed")
	}
	out := filepath.Join(t.TempDir(), "out.raw")
	msg, err := exec.Command("qemu-img", "convert", "-f", fmtName, "-O", "raw", img, out).CombinedOutput()
	if err != nil {
		return msg, err
	}
	return os.ReadFile(out)
}

func writeFile(t *testing.T, write func(f *os.File) error) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := write(f); err != nil {
		t.Fatal(err)
	}
	return p
}

// The sound images the generators write read as their disk in qemu-img;
// the hostile ones as qemu-img sees them.
func TestGeneratorsAgainstQemuImg(t *testing.T) {
	disk, clusters := Disk(16, 2)
	for _, q := range []QCOW2{
		{VirtualSize: int64(len(disk)), Clusters: clusters},
		{VirtualSize: int64(len(disk)), Clusters: clusters, Zstd: true},
		{VirtualSize: int64(len(disk)), Clusters: clusters, Filler: 3<<20 + 5},
		{VirtualSize: int64(len(disk)), Clusters: clusters, Filler: 1 << 20, L2AfterFiller: true},
	} {
		img := writeFile(t, func(f *os.File) error { _, err := q.WriteTo(f); return err })
		got, err := qemuConvert(t, img, "qcow2")
		if err != nil {
			t.Fatalf("%+v: qemu-img: %v: %s", q.Filler, err, got)
		}
		if !bytes.Equal(got, disk) {
			t.Errorf("zstd %v filler %d L2 after %v: qemu-img reads another disk", q.Zstd, q.Filler, q.L2AfterFiller)
		}
	}
	long := append([][]byte{}, clusters...)
	long[2] = append(append([]byte{}, clusters[2]...), make([]byte, 512)...)
	img := writeFile(t, func(f *os.File) error {
		_, err := QCOW2{VirtualSize: int64(len(disk)), Clusters: long, Zstd: true}.WriteTo(f)
		return err
	})
	if msg, err := qemuConvert(t, img, "qcow2"); err == nil {
		t.Errorf("qemu-img converts a zstd cluster that inflates past the cluster size")
	} else {
		t.Logf("qemu-img: %s", msg)
	}

	for _, magic := range []string{"KDMV", "XXXX"} {
		img := writeFile(t, func(f *os.File) error { return VMDKFooter(f, disk, magic) })
		got, err := qemuConvert(t, img, "vmdk")
		switch {
		case magic == "KDMV" && err != nil:
			t.Fatalf("qemu-img refuses the sound footer: %v: %s", err, got)
		case magic == "KDMV" && !bytes.Equal(got, disk):
			t.Errorf("qemu-img reads another disk from the footer layout")
		case magic != "KDMV" && (err == nil || !strings.Contains(string(got), "footer")):
			t.Errorf("qemu-img with footer magic %q: %v: %s", magic, err, got)
		}
	}
}
