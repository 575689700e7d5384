/*
 * diskimport-inflate: decodes a gzip stream (one or more members, each
 * member's CRC32 and ISIZE checked) from standard input into a ring of
 * slots in shared memory, so the decoded bytes reach the importer without
 * a pipe: the decoder writes each byte once, where the importer reads it.
 *
 *   diskimport-inflate SLOT_BYTES SLOTS
 *
 * fd 3: the ring, a shared memory file of SLOTS * SLOT_BYTES bytes.
 * fd 1: "filled" records to the importer, 8 bytes each, native order:
 *       uint32 slot, uint32 length (a slot holds length decoded bytes).
 * fd 4: "free" records from the importer, 4 bytes each: uint32 slot, a
 *       slot the importer is done with. Every slot starts free.
 * The decoder exits 0 once the input ended after a complete member and
 * every decoded byte was handed over; on bad input it names the cause on
 * fd 2 and exits 1. Bytes after the last member that do not start another
 * one are ignored, as igzip ignores them.
 *
 * It opens nothing: the importer runs it in its sandbox, as it runs igzip.
 */
#include <errno.h>
#include <isa-l/igzip_lib.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define IN_BYTES (1 << 20)

static void fail(const char *msg)
{
	fprintf(stderr, "diskimport-inflate: %s\n", msg);
	exit(1);
}

static void full_write(int fd, const void *p, size_t n)
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

static int full_read(int fd, void *p, size_t n)
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

/* Ring: the slots, and which are free to decode into. */
static uint8_t *ring;
static uint32_t slot_bytes, slots;
static uint32_t *free_slots, nfree;

static uint32_t take_slot(void)
{
	if (nfree == 0) {
		uint32_t s;
		if (full_read(4, &s, sizeof s) != sizeof s)
			exit(2); /* the importer went away */
		if (s >= slots)
			fail("the importer freed a slot out of range");
		return s;
	}
	return free_slots[--nfree];
}

static void hand_over(uint32_t slot, uint32_t len)
{
	uint32_t rec[2] = {slot, len};
	full_write(1, rec, sizeof rec);
}

static const char *inflate_error(int ret)
{
	switch (ret) {
	case ISAL_INCORRECT_CHECKSUM:
		return "corrupt data: a member's checksum (CRC32 or ISIZE) does not match";
	case ISAL_INVALID_WRAPPER:
		return "corrupt data: invalid gzip header";
	case ISAL_UNSUPPORTED_METHOD:
		return "corrupt data: unsupported compression method";
	case ISAL_INVALID_BLOCK:
		return "corrupt data: invalid deflate block";
	case ISAL_INVALID_SYMBOL:
		return "corrupt data: invalid deflate symbol";
	case ISAL_INVALID_LOOKBACK:
		return "corrupt data: invalid back-reference distance";
	case ISAL_NEED_DICT:
		return "corrupt data: a preset dictionary is needed";
	}
	return "corrupt data";
}

int main(int argc, char **argv)
{
	if (argc != 3)
		fail("usage: diskimport-inflate SLOT_BYTES SLOTS");
	slot_bytes = (uint32_t)strtoul(argv[1], NULL, 10);
	slots = (uint32_t)strtoul(argv[2], NULL, 10);
	if (slot_bytes < 65536 || slots < 2 || slots > 1024)
		fail("slot size or count out of range");
	ring = mmap(NULL, (size_t)slot_bytes * slots, PROT_READ | PROT_WRITE, MAP_SHARED, 3, 0);
	if (ring == MAP_FAILED)
		fail("mapping the ring (fd 3) failed");
	free_slots = malloc(sizeof *free_slots * slots);
	uint8_t *in = malloc(IN_BYTES);
	struct inflate_state *st = malloc(sizeof *st);
	if (!free_slots || !in || !st)
		fail("out of memory");
	for (uint32_t i = 0; i < slots; i++)
		free_slots[nfree++] = slots - 1 - i;

	isal_inflate_init(st);
	st->crc_flag = ISAL_GZIP;
	st->avail_in = 0;
	int in_eof = 0, member_done = 0;
	uint32_t slot = take_slot(), pos = 0;
	for (;;) {
		if (st->avail_in == 0 && !in_eof) {
			int n = full_read(0, in, IN_BYTES);
			if (n < 0)
				fail("reading the input failed");
			if (n < IN_BYTES)
				in_eof = 1;
			st->next_in = in;
			st->avail_in = (uint32_t)n;
		}
		if (member_done) {
			/* Another member follows, or the stream ends here. */
			if (st->avail_in == 0 && in_eof)
				break;
			if (st->avail_in < 2 && !in_eof) {
				/* One byte left and more to come: keep it, read on. */
				memmove(in, st->next_in, st->avail_in);
				int n = full_read(0, in + st->avail_in, IN_BYTES - st->avail_in);
				if (n < 0)
					fail("reading the input failed");
				if ((uint32_t)n < IN_BYTES - st->avail_in)
					in_eof = 1;
				st->next_in = in;
				st->avail_in += (uint32_t)n;
				continue;
			}
			if (st->avail_in < 2 || st->next_in[0] != 0x1f || st->next_in[1] != 0x8b)
				break; /* trailing bytes that start no member: ignored */
			uint8_t *next = st->next_in;
			uint32_t avail = st->avail_in;
			isal_inflate_reset(st);
			st->crc_flag = ISAL_GZIP;
			st->next_in = next;
			st->avail_in = avail;
			member_done = 0;
		}
		st->next_out = ring + (size_t)slot * slot_bytes + pos;
		st->avail_out = slot_bytes - pos;
		int ret = isal_inflate(st);
		if (ret < 0)
			fail(inflate_error(ret));
		pos = slot_bytes - st->avail_out;
		if (st->block_state == ISAL_BLOCK_FINISH)
			member_done = 1;
		if (pos == slot_bytes) {
			hand_over(slot, pos);
			slot = take_slot();
			pos = 0;
		} else if (!member_done && st->avail_in == 0 && in_eof) {
			fail("unexpected end of input: the stream ends inside a member (truncated?)");
		}
	}
	if (pos > 0)
		hand_over(slot, pos);
	return 0;
}
