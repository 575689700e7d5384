package buffers

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAlignedStartsOnTheAlignmentAndHoldsExactlyN(t *testing.T) {
	for _, align := range []int{1, 512, 4096} {
		for _, n := range []int{1, 4095, 4096, 1 << 20} {
			b := Aligned(n, align)
			assert.Len(t, b, n)
			assert.Equal(t, n, cap(b))
			assert.Zero(t, uintptr(unsafe.Pointer(&b[0]))%uintptr(align), "align %d n %d", align, n)
		}
	}
}

func TestPoolHandsBackWhatWasPut(t *testing.T) {
	p := NewPool(64<<10, 2, 4096)
	a, b := p.Get(), p.Get()
	require.Len(t, a, 64<<10)
	assert.NotSame(t, &a[0], &b[0])
	p.Put(a[:100]) // resliced: still the pool's
	got := p.Get()
	assert.Same(t, &a[0], &got[0])
	assert.Len(t, got, 64<<10)
	assert.EqualValues(t, 2*64<<10, p.Allocated(), "two buffers made, one of them reused")
}

func TestPoolKeepsItsBuffersAcrossGarbageCollections(t *testing.T) {
	p := NewPool(1<<20, 4, 4096)
	bufs := [][]byte{p.Get(), p.Get(), p.Get(), p.Get()}
	for _, b := range bufs {
		p.Put(b)
	}
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		b := [][]byte{p.Get(), p.Get(), p.Get(), p.Get()}
		for _, x := range b {
			p.Put(x)
		}
		runtime.GC()
	}
	runtime.ReadMemStats(&after)
	// 400 gets of 1 MiB buffers: a pool that forgets its free buffers at
	// a collection allocates about 400 MiB here.
	assert.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(1<<20), "allocated while reusing four buffers")
}

func TestPoolDropsWhatItCannotKeepAndForeignSizes(t *testing.T) {
	p := NewPool(4096, 1, 1)
	a, b := p.Get(), p.Get()
	p.Put(a)
	p.Put(b) // the one free slot is taken: dropped
	p.Put(make([]byte, 8192))
	assert.Len(t, p.free, 1)
	got := p.Get()
	assert.Same(t, &a[0], &got[0])
	got = p.Get()
	assert.NotSame(t, &b[0], &got[0], "a dropped buffer came back")
}

func TestCirculatingHoldsNBuffersAndTakingOneMoreWaits(t *testing.T) {
	c := Circulating(3, 8192, 4096)
	var got [][]byte
	for range 3 {
		b := <-c
		require.Len(t, b, 8192)
		assert.Zero(t, uintptr(unsafe.Pointer(&b[0]))%4096)
		got = append(got, b)
	}
	select {
	case <-c:
		t.Fatal("a fourth buffer")
	default:
	}
	c <- got[1]
	b := <-c
	assert.Same(t, &got[1][0], &b[0])
}
