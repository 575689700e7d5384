/*
 * The ring protocol every mode of diskimport-inflate shares: the output
 * ring the importer reads in place (fd 3, slots handed over on fd 1,
 * handed back on fd 4) and the input, a stream on standard input or
 * records naming slots of the input ring (fd 5, handed back on fd 6).
 * The whole protocol is described in main.c.
 */
#ifndef DISKIMPORT_RING_H
#define DISKIMPORT_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The output ring: slots of slot_bytes, mapped from fd 3. */
extern uint8_t *ring;
extern uint32_t slot_bytes, slots;

/* The input ring (fd 5), NULL when the stream comes on standard input. */
extern const uint8_t *in_ring;
extern uint32_t in_slot_bytes, in_slots;

/* fail names the cause on standard error and exits 1. */
void fail(const char *msg) __attribute__((noreturn));
void full_write(int fd, const void *p, size_t n);
int full_read(int fd, void *p, size_t n);
ssize_t read_records(int fd, void *buf, size_t cap, size_t rec);

/* take_slot returns a free output slot, waiting for the importer to hand
 * one back; give_back_slot returns one this side never handed over. */
uint32_t take_slot(void);
void give_back_slot(uint32_t slot);
/* hand_over names len bytes in slot to the importer (len 1 to slot_bytes),
 * or a failed block (slot NO_SLOT, len its reason); bit i of zeros says
 * the slot's ZERO_GRANULE_BYTES at i * ZERO_GRANULE_BYTES are all zeros
 * (0: none known). */
void hand_over(uint32_t slot, uint32_t len, uint64_t zeros);
#define ZERO_GRANULE_BYTES (64u << 10)
#define NO_SLOT 0xffffffffu

/* next_input points *next and *avail at the stream's next bytes, handing
 * back the input slot read before; it returns 0 at the end of the stream.
 * The bytes stay valid until the next call. */
int next_input(const uint8_t **next, uint32_t *avail);

/* ring_setup maps the output ring (and the input ring when in_slot_bytes
 * is not 0) and marks every output slot free. */
void ring_setup(uint32_t out_slot_bytes, uint32_t out_slots, uint32_t in_bytes, uint32_t in_count);

int run_gzip(void);
int run_blocks(int zlib);
int run_xz(uint32_t threads, uint64_t memlimit, uint64_t memlimit_threading);

#endif
