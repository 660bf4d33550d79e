/*
 * sha: SHA-256 over streams (OpenSSL EVP), lower-case hex digests.
 */
#ifndef ESHARD_SHA_H
#define ESHARD_SHA_H

#include <stddef.h>
#include <stdint.h>

struct es_sha {
	void *ctx; /* EVP_MD_CTX */
};

int es_sha_init(struct es_sha *s);
void es_sha_update(struct es_sha *s, const void *p, size_t n);
/* Writes 64 hex chars + NUL and releases the context. */
int es_sha_final(struct es_sha *s, char hex[65]);
/* Release without a digest (error paths). */
void es_sha_abort(struct es_sha *s);
/* Hash a whole regular file (es_fs_open_read: a FIFO or device is refused, never read);
 * *size gets its byte count when size is not NULL. */
int es_sha_file(const char *path, char hex[65], uint64_t *size);

#endif
