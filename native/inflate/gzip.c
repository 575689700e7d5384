/*
 * Gzip mode: a gzip stream, one member or more, from the input into the
 * output slots in order. See main.c.
 */
#include "ring.h"

#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#include <stdlib.h>
#include <string.h>

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
 * child alone on that file 1.58-1.62 CPU-s against 1.58-1.64). The zero
 * granules found are named with their slot (hand_over's zeros), so the
 * importer takes them as zeros without copying or scanning them again.
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
	uint64_t zeros; /* the slot's granules of zeros, as hand_over names them */
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
		if (from == start && all_zero(slot_at(o, start), granule_bytes)) {
			o->crc = crc_after_zero_granule(o->crc);
			/* named only where a granule is the map's and the map has its bit */
			if (granule_bytes == ZERO_GRANULE_BYTES && start / granule_bytes < 64)
				o->zeros |= 1ull << (start / granule_bytes);
		} else if (from < end)
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

/* stream_input points next_in at the stream's next bytes. */
static int stream_input(struct inflate_state *st)
{
	const uint8_t *next;
	uint32_t avail;
	if (!next_input(&next, &avail))
		return 0;
	st->next_in = (uint8_t *)next;
	st->avail_in = avail;
	return 1;
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
	} else if (input_ended || !stream_input(st)) {
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

int run_gzip(void)
{
	struct inflate_state *st = malloc(sizeof *st);
	if (st == NULL)
		fail("out of memory");
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
				hand_over(o.slot, o.pos, o.zeros);
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
		hand_over(o.slot, o.pos, o.zeros);
	return 0;
}

