/*
 * Unit tests of src/stop.c: the stop flag as long steps see it, and the exit status of a
 * result (docs/design.md#exit-codes).
 */
#include "testlib.h"

#include "eshard/log.h"
#include "eshard/stop.h"

#include <signal.h>

static volatile sig_atomic_t flag;

/* Without a flag, or with a flag at 0, nothing is stopped. */
static void test_not_stopped(void)
{
	es_set_stop_flag(NULL);
	CHECK_INT_EQ(es_stop_signal(), 0);
	CHECK_INT_EQ(es_check_stop("merge"), 0);
	flag = 0;
	es_set_stop_flag(&flag);
	CHECK_INT_EQ(es_stop_signal(), 0);
	CHECK_INT_EQ(es_check_stop("merge"), 0);
}

/* A set flag stops the next check with ES_EINTR and names the step and the signal. */
static void test_stopped(void)
{
	flag = SIGTERM;
	es_set_stop_flag(&flag);
	CHECK_INT_EQ(es_stop_signal(), SIGTERM);
	es_log_quiet_begin();
	CHECK_INT_EQ(es_check_stop("merge"), ES_EINTR);
	es_log_quiet_end();
	CHECK_STR_EQ(es_last_error(), "merge stopped by signal 15");
	es_set_stop_flag(NULL);
}

/* 0 stays 0; ES_EINTR is 128+N only while the process is stopping by signal N; else 2. */
static void test_exit_code(void)
{
	es_set_stop_flag(NULL);
	CHECK_INT_EQ(es_exit_code(0), 0);
	CHECK_INT_EQ(es_exit_code(ES_EIO), 2);
	CHECK_INT_EQ(es_exit_code(ES_EUSAGE), 2);
	CHECK_INT_EQ(es_exit_code(ES_EINTR), 2);
	flag = SIGINT;
	es_set_stop_flag(&flag);
	CHECK_INT_EQ(es_exit_code(ES_EINTR), 128 + SIGINT);
	CHECK_INT_EQ(es_exit_code(ES_EIO), 2);
	CHECK_INT_EQ(es_exit_code(0), 0);
	es_set_stop_flag(NULL);
}

int main(void)
{
	test_not_stopped();
	test_stopped();
	test_exit_code();
	return test_done();
}
