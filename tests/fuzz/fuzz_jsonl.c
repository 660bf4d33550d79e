/*
 * libFuzzer target: the JSONL line validator and canonical encoder (src/jsonl.c), on one
 * line (the whole input, '\n' included if there is one: the validator must refuse it).
 *
 * Each input runs through two contexts, a plain one and one with media keys and index keys
 * (the paths made absolute, the row index added), and these properties must hold:
 * - a failed es_jsonl_normalize() leaves its output buffer as it was;
 * - a normalized line is one line ending in '\n', es_jsonl_validate() accepts it, and
 *   normalizing it again gives the same bytes (the canonical form is a fixed point);
 * - what es_jsonl_normalize() accepts, es_jsonl_validate() accepts (it checks less).
 */
#include "fuzzlib.h"

#include "eshard/buf.h"
#include "eshard/jsonl.h"
#include "eshard/log.h"

#include <string.h>

static struct es_jsonl *plain, *media;

static void contexts(void)
{
	static const char *const media_keys[] = { "images", "audios", "videos" };
	static const char *const index_keys[] = { "global_index", "row" };
	struct es_jsonl_opts o = { media_keys, 3, "/data/root", index_keys, 2 };
	plain = es_jsonl_new(NULL);
	media = es_jsonl_new(&o);
	if (!plain || !media)
		exit(1);
	es_log_quiet_begin(); /* the messages of refused lines are expected, not news */
}

static void one(struct es_jsonl *j, const char *line, size_t len, uint64_t gi)
{
	static const char kept[] = "kept\n";
	struct es_buf out = ES_BUF_INIT;
	es_buf_adds(&out, kept);
	int rc = es_jsonl_normalize(j, line, len, gi, "fuzz.jsonl", 1, &out);
	int vrc = es_jsonl_validate(j, line, len, "fuzz.jsonl", 1);
	FUZZ_CHECK(rc == 0 || rc == ES_EINVAL || rc == ES_ENOMEM);
	FUZZ_CHECK(vrc == 0 || vrc == ES_EINVAL || vrc == ES_ENOMEM);
	if (rc) {
		FUZZ_CHECK(out.len == strlen(kept) && !memcmp(out.data, kept, out.len));
		es_buf_free(&out);
		return;
	}
	FUZZ_CHECK(vrc == 0);
	const char *canon = out.data + strlen(kept);
	size_t n = out.len - strlen(kept);
	FUZZ_CHECK(n >= 3 && canon[n - 1] == '\n' && canon[0] == '{' && canon[n - 2] == '}');
	FUZZ_CHECK(memchr(canon, '\n', n - 1) == NULL);
	FUZZ_CHECK(es_jsonl_validate(j, canon, n - 1, "canon.jsonl", 1) == 0);
	struct es_buf again = ES_BUF_INIT;
	FUZZ_CHECK(es_jsonl_normalize(j, canon, n - 1, gi + 1, "canon.jsonl", 1, &again) == 0);
	FUZZ_CHECK(again.len == n && !memcmp(again.data, canon, n));
	es_buf_free(&again);
	es_buf_free(&out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!plain)
		contexts();
	one(plain, (const char *)data, size, size);
	one(media, (const char *)data, size, (uint64_t)size * 7919);
	return 0;
}
