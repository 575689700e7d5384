/*
 * diskimport-inflate: inflates into a ring of slots in shared memory, so
 * the decoded bytes reach the importer without a pipe: the decoder writes
 * each byte once, where the importer reads it. ISA-L's inflate.
 *
 *   diskimport-inflate gzip SLOT_BYTES SLOTS [IN_SLOT_BYTES IN_SLOTS]
 *     decodes a gzip stream (one or more members, each member's CRC32 and
 *     ISIZE checked) from standard input into the slots, in order. Bytes
 *     after the last member that do not start another one are ignored,
 *     as igzip ignores them. With IN_SLOT_BYTES and IN_SLOTS the stream
 *     comes through an input ring instead, so no pipe copies it either:
 *     standard input carries records, native order, uint32 slot, uint32
 *     length (1 to IN_SLOT_BYTES), each naming the next bytes of the
 *     stream in that slot of fd 5; the end of standard input ends the
 *     stream. Each slot decoded is handed back on fd 6 (uint32 slot).
 *   diskimport-inflate zlib|deflate SLOT_BYTES SLOTS IN_SLOT_BYTES IN_SLOTS
 *     inflates independent blocks (a vmdk grain: one zlib stream; a qcow2
 *     compressed cluster: raw deflate), each into a slot of its own. Each
 *     block lies in a slot of the input ring (fd 5), named by a record on
 *     standard input, native order: uint32 input slot, uint32 input length
 *     (at most IN_SLOT_BYTES), uint32 output length (1 to SLOT_BYTES). A
 *     block's input slot is the importer's again once the block's result
 *     record is written: nothing is handed back on fd 6. A zlib block must
 *     be one complete stream (no preset dictionary) of at most its output
 *     length, its Adler-32 right; a deflate block gives the first
 *     output-length bytes of its stream, or fewer, whatever follows.
 *
 * fd 3: the ring, a shared memory file of SLOTS * SLOT_BYTES bytes.
 * fd 1: result records to the importer, 8 bytes each, native order:
 *       uint32 slot, uint32 length (a slot holds length decoded bytes); in
 *       the block modes, a block that cannot be inflated is uint32
 *       0xffffffff, uint32 a reason (BAD_* below) and takes no slot.
 * fd 4: "free" records from the importer, 4 bytes each: uint32 slot, a
 *       slot the importer is done with. Every slot starts free.
 * fd 5: with an input ring, the ring, IN_SLOTS * IN_SLOT_BYTES bytes,
 *       mapped read-only (the importer seals it against writers).
 * fd 6: with the gzip input ring, the input slots handed back.
 * It exits 0 once the input ended (in gzip mode after a complete member)
 * and every result was handed over; on bad gzip input or a record out of
 * bounds it names the cause on fd 2 and exits 1.
 *
 * It opens nothing: the importer runs it in its sandbox, as it runs igzip.
 */
#include <errno.h>
#include <isa-l/crc.h>
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

/* read_records reads into buf (cap bytes, a multiple of rec) as many
 * whole records of rec bytes as have come on fd, one read for all of them,
 * the rest of a record the pipe split read too. It returns the bytes
 * read, 0 at the end of fd, -1 when a read failed or the end cut a
 * record. */
static ssize_t read_records(int fd, void *buf, size_t cap, size_t rec)
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

/* take_slot returns a free slot, waiting for the importer to free one:
 * every "free" record that has come is read at once. */
static uint32_t take_slot(void)
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

static void hand_over(uint32_t slot, uint32_t len)
{
	uint32_t rec[2] = {slot, len};
	full_write(1, rec, sizeof rec);
}

/* The gzip stream's input: read from standard input into in_buf, or named
 * by records in slots of the input ring (in_ring non-NULL). */
static uint8_t *in_buf;
static const uint8_t *in_ring;
static uint32_t in_slot_bytes, in_slots;
static int64_t in_cur = -1; /* the input slot being decoded, -1 when none */

/* next_input points next_in at the stream's next bytes, handing back the
 * input slot decoded before; it returns 0 at the end of the stream. */
static int next_input(struct inflate_state *st)
{
	if (in_ring == NULL) {
		int n = full_read(0, in_buf, IN_BYTES);
		if (n < 0)
			fail("reading the input failed");
		st->next_in = in_buf;
		st->avail_in = (uint32_t)n;
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
	st->next_in = (uint8_t *)in_ring + (size_t)rec[0] * in_slot_bytes;
	st->avail_in = rec[1];
	return 1;
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

/* Why a block cannot be inflated, in its result record. */
enum {
	BAD_ZLIB_HEADER = 1,
	BAD_ZLIB_DICTIONARY,
	BAD_DATA,
	BAD_CHECKSUM,
	BAD_TRUNCATED,
	BAD_TOO_LONG,
};

#define NO_SLOT 0xffffffffu

/* inflate_block inflates one block into out (out_len bytes at most) and
 * returns 0 with *n set, or a BAD_* reason. */
static int inflate_block(struct inflate_state *st, int zlib, uint8_t *in, uint32_t in_len,
			 uint8_t *out, uint32_t out_len, uint32_t *n)
{
	isal_inflate_init(st);
	if (zlib) {
		if (in_len < 2)
			return BAD_TRUNCATED;
		/* deflate, a window of at most 32 KiB, the check bits right */
		if ((in[0] & 0x0f) != 8 || (in[0] >> 4) > 7 || ((in[0] << 8) | in[1]) % 31 != 0)
			return BAD_ZLIB_HEADER;
		if (in[1] & 0x20)
			return BAD_ZLIB_DICTIONARY;
		st->crc_flag = ISAL_ZLIB_NO_HDR_VER; /* the Adler-32 after the data, checked */
		in += 2;
		in_len -= 2;
	} else {
		st->crc_flag = ISAL_DEFLATE;
	}
	st->next_in = in;
	st->avail_in = in_len;
	st->next_out = out;
	st->avail_out = out_len;
	int ret = isal_inflate(st);
	*n = out_len - st->avail_out;
	if (ret == ISAL_INCORRECT_CHECKSUM)
		return BAD_CHECKSUM;
	if (ret < 0)
		return BAD_DATA;
	if (!zlib || st->block_state == ISAL_BLOCK_FINISH)
		return 0;
	if (st->avail_out == 0) {
		/* Exactly full, or longer: one more byte tells. */
		uint8_t one;
		st->next_out = &one;
		st->avail_out = 1;
		ret = isal_inflate(st);
		if (ret == ISAL_INCORRECT_CHECKSUM)
			return BAD_CHECKSUM;
		if (ret < 0)
			return BAD_DATA;
		if (st->avail_out == 0)
			return BAD_TOO_LONG;
		if (st->block_state == ISAL_BLOCK_FINISH)
			return 0;
	}
	return BAD_TRUNCATED;
}

/* Block records on standard input, read as many at a time as have come. */
static uint32_t rec_buf[3 * 256];
static size_t rec_have, rec_used; /* bytes in rec_buf, bytes consumed */

/* next_block_record sets rec to the next record and returns 1, or returns
 * 0 at the end of the records. */
static int next_block_record(uint32_t rec[3])
{
	if (rec_used == rec_have) {
		ssize_t r = read_records(0, rec_buf, sizeof rec_buf, 3 * sizeof(uint32_t));
		if (r < 0)
			fail("reading the block records failed, or one was cut");
		rec_have = (size_t)r;
		rec_used = 0;
		if (rec_have == 0)
			return 0;
	}
	memcpy(rec, (char *)rec_buf + rec_used, 3 * sizeof(uint32_t));
	rec_used += 3 * sizeof(uint32_t);
	return 1;
}

static int run_blocks(struct inflate_state *st, int zlib)
{
	uint32_t rec[3];
	while (next_block_record(rec)) {
		if (rec[0] >= in_slots || rec[1] > in_slot_bytes || rec[2] == 0 || rec[2] > slot_bytes)
			fail("a block record out of bounds");
		uint8_t *in = (uint8_t *)in_ring + (size_t)rec[0] * in_slot_bytes;
		uint32_t slot = take_slot(), n = 0;
		int bad = inflate_block(st, zlib, in, rec[1], ring + (size_t)slot * slot_bytes, rec[2], &n);
		if (!bad && n == 0)
			bad = BAD_TRUNCATED; /* a result record names at least a byte */
		if (bad) {
			free_slots[nfree++] = slot;
			hand_over(NO_SLOT, (uint32_t)bad);
		} else {
			hand_over(slot, n);
		}
	}
	return 0;
}

/*
 * Gzip mode. ISA-L parses each member's header and inflates its deflate
 * data without a checksum (ISAL_DEFLATE); the CRC-32 and ISIZE are
 * checked here, a granule (GRANULE_BYTES) at a time, a granule of zeros
 * folded into the CRC by one multiplication instead of run through it.
 * On the bench's 2 GiB raw.gz (65 % zeros) ISA-L's CRC of every byte was
 * 7.7 % of an import's CPU under 750m (perf), the CRC of the rest and the
 * zero check are 5.5 %: 2-3 % less CPU for the import in CDI's pod. Each
 * call inflates at most GZIP_CALL_BYTES, about a core's L2, so a granule
 * is checked while it is still there (4 MiB calls measured the same: the
 * child alone on that file 1.58-1.62 CPU-s against 1.58-1.64).
 */
#define GZIP_CALL_BYTES (512u << 10)
#define GRANULE_BYTES (64u << 10)

static uint32_t granule_bytes;
/* x^(8 * granule_bytes) modulo the CRC-32 polynomial, bit-reflected as
 * crc32_gzip_refl keeps its register. */
static uint32_t zero_granule_factor;

#define CRC32_POLY_REFLECTED 0xedb88320u

/* gf2_multiply returns a * b modulo the CRC-32 polynomial, both in the
 * reflected order (bit 31 the coefficient of x^0). */
static uint32_t gf2_multiply(uint32_t a, uint32_t b)
{
	uint32_t product = 0;
	for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
		if (a & bit)
			product ^= b;
		b = (b & 1) ? (b >> 1) ^ CRC32_POLY_REFLECTED : b >> 1;
	}
	return product;
}

/* x_to_8n returns x^(8n) modulo the polynomial, n a power of two. */
static uint32_t x_to_8n(uint32_t n)
{
	uint32_t p = 1u << 30; /* x^1 */
	for (uint64_t e = 1; e < 8ull * n; e <<= 1)
		p = gf2_multiply(p, p);
	return p;
}

/* crc_after_zero_granule is the gzip CRC-32 crc after granule_bytes more
 * zero bytes: the register (crc inverted) times x^(8 * granule_bytes). */
static uint32_t crc_after_zero_granule(uint32_t crc)
{
	return ~gf2_multiply(~crc, zero_granule_factor);
}

static int all_zero(const uint8_t *p, size_t n)
{
	size_t i = 0;
	for (; i + 64 <= n; i += 64) {
		uint64_t w[8];
		memcpy(w, p + i, sizeof w);
		if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0)
			return 0;
	}
	for (; i < n; i++)
		if (p[i] != 0)
			return 0;
	return 1;
}

/* The output: the slot being filled, how far, how much of it is in the
 * CRC, and the member's CRC-32 over its bytes up to crc_at. */
struct gzip_out {
	uint32_t slot, pos;
	uint32_t checked; /* bytes of whole granules checked */
	uint32_t crc_at;  /* the member's bytes in this slot before crc_at are in crc */
	uint32_t crc;
};

static uint8_t *slot_at(const struct gzip_out *o, uint32_t off)
{
	return ring + (size_t)o->slot * slot_bytes + off;
}

/* check_granules carries the member's CRC over every granule the output
 * filled since the last call, folding in the ones of zeros. */
static void check_granules(struct gzip_out *o)
{
	while (o->checked + granule_bytes <= o->pos) {
		uint32_t start = o->checked, end = start + granule_bytes;
		/* a granule the member began inside is only partly its own */
		uint32_t from = o->crc_at > start ? o->crc_at : start;
		if (from == start && all_zero(slot_at(o, start), granule_bytes))
			o->crc = crc_after_zero_granule(o->crc);
		else if (from < end)
			o->crc = crc32_gzip_refl(o->crc, slot_at(o, from), end - from);
		o->crc_at = end;
		o->checked = end;
	}
}

/* The input as ISA-L reads it: the buffer next_in points into, and the
 * stream's last bytes before that buffer, which ISA-L may have read into
 * its bit buffer and puts back (before the buffer) when a member's deflate
 * data ends. */
static const uint8_t *buf_start;
static uint8_t history[8];
static uint32_t history_len;
static int input_ended;
/* A buffer to read after the current one (the rest of an input slot
 * whose first byte was taken to look for another member). */
static const uint8_t *pending;
static uint32_t pending_len;

/* remember keeps the last bytes of the buffer ISA-L consumed, up to p. */
static void remember(const uint8_t *p)
{
	uint32_t n = (uint32_t)(p - buf_start);
	if (n == 0)
		return;
	if (n >= sizeof history) {
		memcpy(history, p - sizeof history, sizeof history);
		history_len = sizeof history;
		return;
	}
	uint32_t keep = history_len + n > sizeof history ? (uint32_t)sizeof history - n : history_len;
	memmove(history, history + history_len - keep, keep);
	memcpy(history + keep, buf_start, n);
	history_len = keep + n;
}

/* refill points next_in at the stream's next bytes once ISA-L has
 * consumed the current buffer; it returns 0 at the end of the stream. */
static int refill(struct inflate_state *st)
{
	remember(st->next_in);
	if (pending != NULL) {
		st->next_in = (uint8_t *)pending;
		st->avail_in = pending_len;
		pending = NULL;
	} else if (input_ended || !next_input(st)) {
		input_ended = 1;
		st->avail_in = 0;
		buf_start = st->next_in;
		return 0;
	}
	buf_start = st->next_in;
	return 1;
}

static void truncated(void)
{
	fail("unexpected end of input: the stream ends inside a member (truncated?)");
}

/* read_trailer reads the member's CRC-32 and ISIZE after its deflate data.
 * Its first bytes may be where ISA-L's inflate left the bytes it read past
 * the data: ISA-L 2.30 keeps them in its bit buffer (read_in, after the
 * last byte's unused bits), later versions put them back before next_in,
 * perhaps before the current buffer. */
static void read_trailer(struct inflate_state *st, uint8_t trailer[8])
{
	uint32_t got = 0;
	if (st->read_in_length >= 8) {
		uint64_t bits = st->read_in >> (st->read_in_length % 8);
		for (got = 0; got < (uint32_t)st->read_in_length / 8 && got < 8; got++)
			trailer[got] = (uint8_t)(bits >> (8 * got));
		st->read_in = 0;
		st->read_in_length = 0;
	} else if ((uintptr_t)st->next_in < (uintptr_t)buf_start) {
		uint32_t back = (uint32_t)((uintptr_t)buf_start - (uintptr_t)st->next_in);
		if (back > history_len || back > 8)
			fail("inflate put back more bytes than it read");
		memcpy(trailer, history + history_len - back, back);
		got = back;
		st->next_in = (uint8_t *)buf_start;
		st->avail_in -= back;
	}
	while (got < 8) {
		if (st->avail_in == 0 && !refill(st))
			truncated();
		uint32_t n = 8 - got < st->avail_in ? 8 - got : st->avail_in;
		memcpy(trailer + got, st->next_in, n);
		st->next_in += n;
		st->avail_in -= n;
		got += n;
	}
}

/* another_member says whether the stream's next bytes start a member (its
 * magic, 1f 8b); bytes that do not are ignored, as igzip ignores them. A
 * magic split between two buffers is handed to ISA-L's header parser one
 * byte at a time: the first from carry, then the next buffer. */
static int another_member(struct inflate_state *st, uint8_t *carry)
{
	if (st->avail_in == 0 && !refill(st))
		return 0;
	if (st->avail_in >= 2)
		return st->next_in[0] == 0x1f && st->next_in[1] == 0x8b;
	*carry = st->next_in[0];
	st->next_in++;
	st->avail_in--;
	if (!refill(st) || *carry != 0x1f || st->next_in[0] != 0x8b)
		return 0;
	pending = st->next_in;
	pending_len = st->avail_in;
	st->next_in = carry;
	st->avail_in = 1;
	buf_start = carry + 1; /* the byte is in the history already */
	return 1;
}

static int run_gzip(struct inflate_state *st)
{
	/* A power of two, at most a 16th of a slot (small rings: tests). */
	for (granule_bytes = GRANULE_BYTES; granule_bytes > slot_bytes / 16;)
		granule_bytes >>= 1;
	zero_granule_factor = x_to_8n(granule_bytes);
	struct gzip_out o = {.slot = take_slot()};
	uint8_t carry;
	st->next_in = NULL;
	st->avail_in = 0;
	buf_start = NULL;
	for (int first = 1; first || another_member(st, &carry); first = 0) {
		uint8_t *next = st->next_in;
		uint32_t avail = st->avail_in;
		isal_inflate_init(st);
		st->crc_flag = ISAL_DEFLATE;
		st->next_in = next;
		st->avail_in = avail;
		struct isal_gzip_header hdr;
		isal_gzip_header_init(&hdr);
		int ret;
		while ((ret = isal_read_gzip_header(st, &hdr)) != ISAL_DECOMP_OK) {
			if (ret != ISAL_END_INPUT)
				fail(inflate_error(ret));
			if (!refill(st))
				truncated();
		}
		o.crc = 0;
		o.crc_at = o.pos;
		while (st->block_state != ISAL_BLOCK_FINISH) {
			if (st->avail_in == 0 && !input_ended)
				refill(st); /* at the end ISA-L may still hold the last bits */
			uint32_t room = slot_bytes - o.pos;
			st->next_out = slot_at(&o, o.pos);
			st->avail_out = room < GZIP_CALL_BYTES ? room : GZIP_CALL_BYTES;
			uint32_t before = st->avail_out;
			ret = isal_inflate(st);
			if (ret < 0)
				fail(inflate_error(ret));
			o.pos += before - st->avail_out;
			if (st->block_state != ISAL_BLOCK_FINISH && st->avail_out > 0 && st->avail_in == 0 && input_ended)
				truncated();
			check_granules(&o);
			if ((st->block_state == ISAL_BLOCK_FINISH || o.pos == slot_bytes) && o.crc_at < o.pos) {
				/* the member's end, or a slot's bytes after its last whole granule */
				o.crc = crc32_gzip_refl(o.crc, slot_at(&o, o.crc_at), o.pos - o.crc_at);
				o.crc_at = o.pos;
			}
			if (o.pos == slot_bytes) {
				hand_over(o.slot, o.pos);
				o = (struct gzip_out){.slot = take_slot(), .crc = o.crc};
			}
		}
		uint8_t trailer[8];
		read_trailer(st, trailer);
		uint32_t crc = (uint32_t)trailer[0] | (uint32_t)trailer[1] << 8 | (uint32_t)trailer[2] << 16 |
			       (uint32_t)trailer[3] << 24;
		uint32_t isize = (uint32_t)trailer[4] | (uint32_t)trailer[5] << 8 | (uint32_t)trailer[6] << 16 |
				 (uint32_t)trailer[7] << 24;
		if (crc != o.crc || isize != (uint32_t)st->total_out)
			fail(inflate_error(ISAL_INCORRECT_CHECKSUM));
	}
	if (o.pos > 0)
		hand_over(o.slot, o.pos);
	return 0;
}

int main(int argc, char **argv)
{
	int blocks = argc >= 2 && (strcmp(argv[1], "zlib") == 0 || strcmp(argv[1], "deflate") == 0);
	if (!(argc == 6 && (blocks || strcmp(argv[1], "gzip") == 0)) && !(argc == 4 && strcmp(argv[1], "gzip") == 0))
		fail("usage: diskimport-inflate gzip SLOT_BYTES SLOTS [IN_SLOT_BYTES IN_SLOTS], or zlib|deflate SLOT_BYTES SLOTS IN_SLOT_BYTES IN_SLOTS");
	slot_bytes = (uint32_t)strtoul(argv[2], NULL, 10);
	slots = (uint32_t)strtoul(argv[3], NULL, 10);
	if (slot_bytes < 4096 || slot_bytes > (64u << 20) || slots < 2 || slots > 1024)
		fail("slot size or count out of range");
	ring = mmap(NULL, (size_t)slot_bytes * slots, PROT_READ | PROT_WRITE, MAP_SHARED, 3, 0);
	if (ring == MAP_FAILED)
		fail("mapping the ring (fd 3) failed");
	free_slots = malloc(sizeof *free_slots * slots);
	struct inflate_state *st = malloc(sizeof *st);
	if (!free_slots || !st)
		fail("out of memory");
	for (uint32_t i = 0; i < slots; i++)
		free_slots[nfree++] = slots - 1 - i;
	if (argc == 6) {
		in_slot_bytes = (uint32_t)strtoul(argv[4], NULL, 10);
		in_slots = (uint32_t)strtoul(argv[5], NULL, 10);
		if (in_slot_bytes < 4096 || in_slot_bytes > (64u << 20) || in_slots < 2 || in_slots > 1024)
			fail("input slot size or count out of range");
		void *m = mmap(NULL, (size_t)in_slot_bytes * in_slots, PROT_READ, MAP_SHARED, 5, 0);
		if (m == MAP_FAILED)
			fail("mapping the input ring (fd 5) failed");
		in_ring = m;
	} else if ((in_buf = malloc(IN_BYTES)) == NULL) {
		fail("out of memory");
	}
	if (blocks)
		return run_blocks(st, argv[1][0] == 'z');

	return run_gzip(st);
}
