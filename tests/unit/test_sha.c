/*
 * Unit tests of src/sha.c: SHA-256 of known vectors (FIPS 180-2), streaming in pieces, the
 * hex form, and es_sha_file on real files (checked against coreutils' sha256sum) and its errors.
 */
#include "testlib.h"

#include "eshard/log.h"
#include "eshard/sha.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define SHA_EMPTY "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define SHA_ABC "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
#define SHA_448 "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
#define SHA_896 "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"
#define SHA_MILLION_A "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"

static const char MSG_448[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
static const char MSG_896[] = "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
			      "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu";

static char *T;

/* Digest of one buffer through init/update/final. */
static void sha_of(const void *p, size_t n, char hex[65])
{
	struct es_sha s;
	memset(hex, 'Z', 65);
	if (!CHECK_INT_EQ(es_sha_init(&s), 0))
		return;
	es_sha_update(&s, p, n);
	CHECK_INT_EQ(es_sha_final(&s, hex), 0);
}

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!CHECK(f != NULL))
		return;
	CHECK_INT_EQ(fwrite(p, 1, n, f), n);
	CHECK_INT_EQ(fclose(f), 0);
}

static void test_known_vectors(void)
{
	char hex[65];
	sha_of("", 0, hex);
	CHECK_STR_EQ(hex, SHA_EMPTY);
	sha_of("abc", 3, hex);
	CHECK_STR_EQ(hex, SHA_ABC);
	sha_of(MSG_448, strlen(MSG_448), hex);
	CHECK_STR_EQ(hex, SHA_448);
	sha_of(MSG_896, strlen(MSG_896), hex);
	CHECK_STR_EQ(hex, SHA_896);
	/* One bit of difference changes the digest. */
	sha_of("abd", 3, hex);
	CHECK(strcmp(hex, SHA_ABC) != 0);
}

/* The hex form: exactly 64 lower-case hex digits and a NUL. */
static void test_hex_form(void)
{
	char hex[66];
	memset(hex, 'Z', sizeof(hex));
	sha_of("abc", 3, hex);
	CHECK_INT_EQ(hex[64], '\0');
	CHECK_INT_EQ(hex[65], 'Z'); /* nothing written past the terminator */
	int bad = 0;
	for (int i = 0; i < 64; i++)
		if (!((hex[i] >= '0' && hex[i] <= '9') || (hex[i] >= 'a' && hex[i] <= 'f')))
			bad++;
	CHECK_INT_EQ(bad, 0);
}

/* Pieces of any size, empty ones included, give the digest of the whole. */
static void test_streaming(void)
{
	struct es_sha s;
	char hex[65];
	CHECK_INT_EQ(es_sha_init(&s), 0);
	es_sha_update(&s, "a", 1);
	es_sha_update(&s, "", 0);
	es_sha_update(&s, NULL, 0);
	es_sha_update(&s, "bc", 2);
	CHECK_INT_EQ(es_sha_final(&s, hex), 0);
	CHECK_STR_EQ(hex, SHA_ABC);

	/* One million 'a' in uneven pieces that straddle the 64-byte block. */
	char *a = malloc(1000000);
	if (!CHECK(a != NULL))
		return;
	memset(a, 'a', 1000000);
	static const size_t pieces[] = { 1, 63, 64, 65, 127, 4096, 7, 100003 };
	CHECK_INT_EQ(es_sha_init(&s), 0);
	size_t done = 0;
	for (size_t i = 0; done < 1000000; i++) {
		size_t n = pieces[i % (sizeof(pieces) / sizeof(pieces[0]))];
		if (n > 1000000 - done)
			n = 1000000 - done;
		es_sha_update(&s, a + done, n);
		done += n;
	}
	CHECK_INT_EQ(es_sha_final(&s, hex), 0);
	CHECK_STR_EQ(hex, SHA_MILLION_A);
	sha_of(a, 1000000, hex);
	CHECK_STR_EQ(hex, SHA_MILLION_A);
	free(a);
}

/* final and abort release the context; a context can be started again afterwards. */
static void test_context_lifecycle(void)
{
	struct es_sha s;
	char hex[65];
	CHECK_INT_EQ(es_sha_init(&s), 0);
	CHECK(s.ctx != NULL);
	es_sha_update(&s, "junk", 4);
	es_sha_abort(&s);
	CHECK(s.ctx == NULL);
	CHECK_INT_EQ(es_sha_init(&s), 0);
	es_sha_update(&s, "abc", 3);
	CHECK_INT_EQ(es_sha_final(&s, hex), 0);
	CHECK(s.ctx == NULL);
	CHECK_STR_EQ(hex, SHA_ABC);
	/* Two digests in flight do not disturb each other. */
	struct es_sha x, y;
	CHECK_INT_EQ(es_sha_init(&x), 0);
	CHECK_INT_EQ(es_sha_init(&y), 0);
	es_sha_update(&x, "ab", 2);
	es_sha_update(&y, MSG_448, 20);
	es_sha_update(&x, "c", 1);
	es_sha_update(&y, MSG_448 + 20, strlen(MSG_448) - 20);
	char hx[65], hy[65];
	CHECK_INT_EQ(es_sha_final(&y, hy), 0);
	CHECK_INT_EQ(es_sha_final(&x, hx), 0);
	CHECK_STR_EQ(hx, SHA_ABC);
	CHECK_STR_EQ(hy, SHA_448);
}

static void test_file_small(void)
{
	char p[4096], hex[65];
	uint64_t size = 12345;
	snprintf(p, sizeof(p), "%s/empty.jsonl", T);
	write_file(p, "", 0);
	CHECK_INT_EQ(es_sha_file(p, hex, &size), 0);
	CHECK_STR_EQ(hex, SHA_EMPTY);
	CHECK_INT_EQ(size, 0);

	snprintf(p, sizeof(p), "%s/abc", T);
	write_file(p, "abc", 3);
	CHECK_INT_EQ(es_sha_file(p, hex, &size), 0);
	CHECK_STR_EQ(hex, SHA_ABC);
	CHECK_INT_EQ(size, 3);
	/* size is optional. */
	memset(hex, 0, sizeof(hex));
	CHECK_INT_EQ(es_sha_file(p, hex, NULL), 0);
	CHECK_STR_EQ(hex, SHA_ABC);
}

/* sha256sum's digest of path, or "" when it cannot be run. */
static void sha256sum(const char *path, char out[65])
{
	char cmd[4200];
	out[0] = '\0';
	snprintf(cmd, sizeof(cmd), "sha256sum '%s'", path);
	FILE *p = popen(cmd, "r");
	if (!CHECK(p != NULL))
		return;
	char line[4300];
	if (CHECK(fgets(line, sizeof(line), p) != NULL) && CHECK(strlen(line) > 64)) {
		memcpy(out, line, 64);
		out[64] = '\0';
	}
	CHECK_INT_EQ(pclose(p), 0);
}

/* A file bigger than the read buffer, with every byte value: same digest as sha256sum. */
static void test_file_large(void)
{
	size_t n = (3u << 20) + 12345;
	unsigned char *data = malloc(n);
	if (!CHECK(data != NULL))
		return;
	uint32_t x = 2463534242u;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		data[i] = (unsigned char)(i < 256 ? i : (x >> 24));
	}
	char p[4096], hex[65], want[65], mem[65];
	snprintf(p, sizeof(p), "%s/big.bin", T);
	write_file(p, data, n);
	uint64_t size = 0;
	CHECK_INT_EQ(es_sha_file(p, hex, &size), 0);
	CHECK_INT_EQ(size, n);
	sha256sum(p, want);
	CHECK_STR_EQ(hex, want);
	sha_of(data, n, mem);
	CHECK_STR_EQ(mem, want);
	free(data);
}

static void test_file_errors(void)
{
	char p[4096], hex[65];
	uint64_t size = 777;
	snprintf(p, sizeof(p), "%s/missing.jsonl", T);
	es_clear_error();
	es_log_quiet_begin();
	int rc = es_sha_file(p, hex, &size);
	es_log_quiet_end();
	CHECK_INT_EQ(rc, ES_EIO);
	CHECK(strstr(es_last_error(), p) != NULL);
	CHECK(strstr(es_last_error(), "No such file") != NULL);
	CHECK_INT_EQ(size, 777); /* no size for a failure */

	/* A folder is not a regular file: refused, never read. */
	snprintf(p, sizeof(p), "%s/folder", T);
	CHECK_INT_EQ(mkdir(p, 0755), 0);
	es_clear_error();
	es_log_quiet_begin();
	rc = es_sha_file(p, hex, &size);
	es_log_quiet_end();
	CHECK_INT_EQ(rc, ES_EINVAL);
	CHECK(strstr(es_last_error(), "is a folder, not a regular file") != NULL);
	CHECK(strstr(es_last_error(), p) != NULL);
	CHECK_INT_EQ(size, 777);
}

int main(void)
{
	T = test_tmpdir();
	test_known_vectors();
	test_hex_form();
	test_streaming();
	test_context_lifecycle();
	test_file_small();
	test_file_large();
	test_file_errors();
	return test_done();
}
