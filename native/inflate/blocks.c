/*
 * Block mode (zlib, deflate): independent blocks, a vmdk grain (one zlib
 * stream) or a qcow2 compressed cluster (raw deflate), each inflated from
 * a slot of the input ring into an output slot of its own. See main.c.
 */
#include "ring.h"

#include <isa-l/igzip_lib.h>
#include <stdlib.h>
#include <string.h>

/* Why a block cannot be inflated, in its result record. */
enum {
	BAD_ZLIB_HEADER = 1,
	BAD_ZLIB_DICTIONARY,
	BAD_DATA,
	BAD_CHECKSUM,
	BAD_TRUNCATED,
	BAD_TOO_LONG,
};


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

int run_blocks(int zlib)
{
	struct inflate_state *st = malloc(sizeof *st);
	if (st == NULL)
		fail("out of memory");
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
			give_back_slot(slot);
			hand_over(NO_SLOT, (uint32_t)bad, 0);
		} else {
			hand_over(slot, n, 0);
		}
	}
	return 0;
}
