/*
 * kc_util.h - small helpers every component needs: clocks, files, ids,
 * hashing, growable strings.
 */
#ifndef KC_UTIL_H
#define KC_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define KC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* Wall clock in ms since the epoch; monotonic clock in ms and ns. */
uint64_t kc_now_ms(void);
uint64_t kc_mono_ms(void);
uint64_t kc_mono_ns(void);
void kc_sleep_ms(uint32_t ms);

/*
 * Reads a whole file. On success *data is a malloc'd buffer (caller frees)
 * holding *len bytes plus a NUL terminator not counted in *len. Refuses
 * files larger than max_len with KC_ENOSPC.
 */
int kc_read_file(const char *path, size_t max_len, char **data, size_t *len);
/* Writes atomically: a temporary file in the same folder, fsync, rename. */
int kc_write_file(const char *path, const void *data, size_t len);
struct cJSON;
/* o printed (indented), written as kc_write_file does; KC_ENOMEM when it
 * cannot be printed. */
int kc_write_json(const char *path, const struct cJSON *o);
/* mkdir -p with the given mode for the folders it creates. */
int kc_mkdirs(const char *path, unsigned mode);

/* A new random id of 16 hex characters (+ NUL) from /dev/urandom. */
void kc_new_id(char out[17]);

/* SHA-256 of data as 64 lowercase hex characters (+ NUL). */
void kc_sha256_hex(const void *data, size_t len, char out[65]);
void kc_sha256(const void *data, size_t len, uint8_t out[32]);
/* The same over data given in pieces (a blob streamed in chunks). */
typedef struct {
	uint32_t h[8];
	uint8_t buf[64];
	size_t nbuf;
	uint64_t len;
} kc_sha256_ctx;
void kc_sha256_init(kc_sha256_ctx *c);
void kc_sha256_update(kc_sha256_ctx *c, const void *data, size_t len);
void kc_sha256_final(kc_sha256_ctx *c, uint8_t out[32]);
void kc_sha256_final_hex(kc_sha256_ctx *c, char out[65]);

/* FNV-1a 64-bit, for cheap non-cryptographic hashing (cache keys). */
uint64_t kc_fnv1a64(const void *data, size_t len, uint64_t seed);

/* A growable NUL-terminated string. All functions return 0 or KC_ENOMEM. */
typedef struct {
	char *buf;
	size_t len;
	size_t cap;
} kc_str;

int kc_str_append(kc_str *s, const char *text);
int kc_str_appendn(kc_str *s, const char *text, size_t n);
int kc_str_printf(kc_str *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Hands the buffer to the caller (never NULL on success) and resets s. */
char *kc_str_take(kc_str *s);
void kc_str_free(kc_str *s);

/*
 * The folder of kclaw's shipped files (prompts, knowledge, examples) named
 * sub, into out: $KCLAW_SHARE_DIR/sub if that variable is set, else
 * <folder of this binary>/../share/kclaw/sub (an install prefix, or a build
 * tree, whose share/kclaw links to the sources). KC_ENOENT with a message
 * naming both ways when the folder does not exist.
 */
int kc_share_dir(const char *sub, char *out, size_t n);

/* Copies src into dst of size n, always terminated; true if it fitted. */
bool kc_strlcpy(char *dst, const char *src, size_t n);

#endif
