#include "eshard/sha.h"
#include "eshard/fs.h"
#include "eshard/log.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <unistd.h>

int es_sha_init(struct es_sha *s)
{
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(c);
		s->ctx = NULL;
		return es_error(ES_ENOMEM, "cannot start a SHA-256 digest");
	}
	s->ctx = c;
	return 0;
}

void es_sha_update(struct es_sha *s, const void *p, size_t n)
{
	if (n)
		EVP_DigestUpdate((EVP_MD_CTX *)s->ctx, p, n);
}

int es_sha_final(struct es_sha *s, char hex[65])
{
	unsigned char md[32];
	unsigned int len = 0;
	int ok = EVP_DigestFinal_ex((EVP_MD_CTX *)s->ctx, md, &len) == 1 && len == 32;
	EVP_MD_CTX_free((EVP_MD_CTX *)s->ctx);
	s->ctx = NULL;
	if (!ok)
		return es_error(ES_EINTERNAL, "SHA-256 digest failed");
	static const char digits[] = "0123456789abcdef";
	for (int i = 0; i < 32; i++) {
		hex[2 * i] = digits[md[i] >> 4];
		hex[2 * i + 1] = digits[md[i] & 15];
	}
	hex[64] = '\0';
	return 0;
}

void es_sha_abort(struct es_sha *s)
{
	EVP_MD_CTX_free((EVP_MD_CTX *)s->ctx);
	s->ctx = NULL;
}

int es_sha_file(const char *path, char hex[65], uint64_t *size)
{
	int fd, rc = es_fs_open_read(path, O_RDONLY, &fd);
	if (rc == 1)
		return es_error_errno(ES_EIO, "cannot open '%s'", path);
	if (rc)
		return rc;
	struct es_sha s;
	rc = es_sha_init(&s);
	uint64_t total = 0;
	size_t cap = 1 << 20;
	char *buf = rc ? NULL : malloc(cap);
	if (!rc && !buf)
		rc = es_error(ES_ENOMEM, "out of memory hashing '%s'", path);
	while (!rc) {
		ssize_t n = read(fd, buf, cap);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = es_error_errno(ES_EIO, "cannot read '%s'", path);
			break;
		}
		if (n == 0)
			break;
		es_sha_update(&s, buf, (size_t)n);
		total += (uint64_t)n;
	}
	free(buf);
	close(fd);
	if (rc) {
		es_sha_abort(&s);
		return rc;
	}
	if (size)
		*size = total;
	return es_sha_final(&s, hex);
}
