/* buf: es_strv_sort_unique and es_strv_add_once. */
#include "testlib.h"

#include "eshard/buf.h"
#include "eshard/log.h"

#include <stdlib.h>
#include <string.h>

static void test_strv_sort_unique(void)
{
	struct es_strv a = ES_STRV_INIT;
	es_strv_sort_unique(&a); /* empty: nothing to do */
	CHECK(a.v == NULL && a.n == 0);
	const char *in[] = { "b", "a", "c", "a", "b", "B", "" };
	for (size_t i = 0; i < sizeof(in) / sizeof(*in); i++)
		CHECK_INT_EQ(es_strv_push(&a, strdup(in[i])), 0);
	es_strv_sort_unique(&a);
	const char *want[] = { "", "B", "a", "b", "c" };
	if (CHECK_INT_EQ(a.n, 5))
		for (size_t i = 0; i < 5; i++)
			CHECK_STR_EQ(a.v[i], want[i]);
	CHECK(a.v[a.n] == NULL);
	es_strv_free(&a);

	CHECK_INT_EQ(es_strv_pushf(&a, "x%d", 1), 0);
	es_strv_sort_unique(&a); /* one item */
	CHECK(a.n == 1 && !strcmp(a.v[0], "x1") && a.v[1] == NULL);
	es_strv_free(&a);
	CHECK(a.v == NULL && a.n == 0);
}

static void test_strv_add_once(void)
{
	struct es_strv a = ES_STRV_INIT;
	const char *in[] = { "images", "audios", "images", "videos", "audios" };
	for (size_t i = 0; i < sizeof(in) / sizeof(*in); i++)
		CHECK_INT_EQ(es_strv_add_once(&a, in[i]), 0);
	if (CHECK_INT_EQ(a.n, 3)) {
		CHECK_STR_EQ(a.v[0], "images");
		CHECK_STR_EQ(a.v[1], "audios");
		CHECK_STR_EQ(a.v[2], "videos");
		CHECK(a.v[3] == NULL);
		CHECK(a.v[0] != in[0]); /* a copy */
	}
	es_strv_free(&a);
}

int main(void)
{
	es_log_quiet_begin();
	test_strv_sort_unique();
	test_strv_add_once();
	es_log_quiet_end();
	return test_done();
}
