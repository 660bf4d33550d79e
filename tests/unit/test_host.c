/*
 * Unit tests of src/host.c: es_hostname is gethostname(), read once.
 */
#include "testlib.h"

#include "eshard/host.h"

#include <string.h>
#include <unistd.h>

static void test_hostname(void)
{
	char want[256];
	memset(want, 0, sizeof(want));
	CHECK_INT_EQ(gethostname(want, sizeof(want) - 1), 0);
	const char *h = es_hostname();
	CHECK(h != NULL && h[0] != '\0');
	CHECK_STR_EQ(h, want);
	CHECK(es_hostname() == h); /* cached */
}

int main(void)
{
	test_hostname();
	return test_done();
}
