/* The ring protocol (ring.h): what every mode shares. */
#include "ring.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* The stream's buffer when it comes on standard input. */
#define IN_BYTES (1 << 20)

uint8_t *ring;
uint32_t slot_bytes, slots;
const uint8_t *in_ring;
uint32_t in_slot_bytes, in_slots;

static uint32_t *free_slots, nfree;
static uint8_t *in_buf;
static int64_t in_cur = -1; /* the input slot being decoded, -1 when none */

void fail(const char *msg)
{
	fprintf(stderr, "diskimport-inflate: %s\n", msg);
	exit(1);
}

void full_write(int fd, const void *p, size_t n)
{
	const char *b = p;
	while (n > 0) {
		ssize_t w = write(fd, b, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			exit(2); /* the importer went away */
		b += w;
		n -= (size_t)w;
	}
}

int full_read(int fd, void *p, size_t n)
{
	char *b = p;
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, b + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (int)got;
}

/* read_records reads into buf (cap bytes, a multiple of rec) as many
 * whole records of rec bytes as have come on fd, one read for all of them,
 * the rest of a record the pipe split read too. It returns the bytes
 * read, 0 at the end of fd, -1 when a read failed or the end cut a
 * record. */
ssize_t read_records(int fd, void *buf, size_t cap, size_t rec)
{
	ssize_t r;
	do
		r = read(fd, buf, cap);
	while (r < 0 && errno == EINTR);
	if (r <= 0)
		return r;
	size_t part = (size_t)r % rec;
	if (part != 0) {
		size_t want = rec - part;
		if (full_read(fd, (char *)buf + r, want) != (int)want)
			return -1;
		r += (ssize_t)want;
	}
	return r;
}

/* Every "free" record that has come is read at once. */
uint32_t take_slot(void)
{
	while (nfree == 0) {
		ssize_t r = read_records(4, free_slots, sizeof *free_slots * slots, sizeof *free_slots);
		if (r <= 0)
			exit(2); /* the importer went away */
		nfree = (uint32_t)((size_t)r / sizeof *free_slots);
		for (uint32_t i = 0; i < nfree; i++)
			if (free_slots[i] >= slots)
				fail("the importer freed a slot out of range");
	}
	return free_slots[--nfree];
}

void give_back_slot(uint32_t slot)
{
	free_slots[nfree++] = slot;
}

void hand_over(uint32_t slot, uint32_t len, uint64_t zeros)
{
	struct {
		uint32_t slot, len;
		uint64_t zeros;
	} rec = {slot, len, zeros};
	full_write(1, &rec, sizeof rec);
}

int next_input(const uint8_t **next, uint32_t *avail)
{
	if (in_ring == NULL) {
		int n = full_read(0, in_buf, IN_BYTES);
		if (n < 0)
			fail("reading the input failed");
		*next = in_buf;
		*avail = (uint32_t)n;
		return n > 0;
	}
	if (in_cur >= 0) {
		uint32_t s = (uint32_t)in_cur;
		full_write(6, &s, sizeof s);
		in_cur = -1;
	}
	uint32_t rec[2];
	int got = full_read(0, rec, sizeof rec);
	if (got < 0)
		fail("reading the input records failed");
	if (got == 0)
		return 0;
	if (got != sizeof rec)
		fail("a cut input record");
	if (rec[0] >= in_slots || rec[1] == 0 || rec[1] > in_slot_bytes)
		fail("an input record out of bounds");
	in_cur = rec[0];
	*next = in_ring + (size_t)rec[0] * in_slot_bytes;
	*avail = rec[1];
	return 1;
}

void ring_setup(uint32_t out_slot_bytes, uint32_t out_slots, uint32_t in_bytes, uint32_t in_count)
{
	slot_bytes = out_slot_bytes;
	slots = out_slots;
	if (slot_bytes < 4096 || slot_bytes > (64u << 20) || slots < 2 || slots > 1024)
		fail("slot size or count out of range");
	ring = mmap(NULL, (size_t)slot_bytes * slots, PROT_READ | PROT_WRITE, MAP_SHARED, 3, 0);
	if (ring == MAP_FAILED)
		fail("mapping the ring (fd 3) failed");
	if ((free_slots = malloc(sizeof *free_slots * slots)) == NULL)
		fail("out of memory");
	for (uint32_t i = 0; i < slots; i++)
		free_slots[nfree++] = slots - 1 - i;
	if (in_bytes == 0) {
		if ((in_buf = malloc(IN_BYTES)) == NULL)
			fail("out of memory");
		return;
	}
	in_slot_bytes = in_bytes;
	in_slots = in_count;
	if (in_slot_bytes < 4096 || in_slot_bytes > (64u << 20) || in_slots < 2 || in_slots > 1024)
		fail("input slot size or count out of range");
	void *m = mmap(NULL, (size_t)in_slot_bytes * in_slots, PROT_READ, MAP_SHARED, 5, 0);
	if (m == MAP_FAILED)
		fail("mapping the input ring (fd 5) failed");
	in_ring = m;
}
