/*
 * Unit tests of src/util.c: ISO times (Python's datetime.isoformat() with a UTC offset), the
 * clocks and es_sleep, es_hostname, strict number parsing, the launcher-identity filter of
 * child environments, the test crash points, and the edit distance behind "did you mean".
 */
#include "testlib.h"

#include "eshard/log.h"
#include "eshard/util.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void iso_at(time_t sec, long nsec, const char *want, const char *file, int line)
{
	struct timespec ts = { sec, nsec };
	char out[40];
	memset(out, 'Z', sizeof(out));
	es_time_iso(&ts, out);
	if (!test_check_str(out, want, "es_time_iso", "want", file, line))
		fprintf(stderr, "  at %lld.%09ld\n", (long long)sec, nsec);
}
#define ISO(sec, nsec, want) iso_at((sec), (nsec), (want), __FILE__, __LINE__)

/* Values checked with Python: datetime.fromtimestamp(s, timezone.utc).isoformat(). */
static void test_time_iso(void)
{
	ISO(1796200661, 108116000, "2026-12-02T08:37:41.108116+00:00");
	ISO(1796200661, 1000, "2026-12-02T08:37:41.000001+00:00");
	ISO(1796200661, 10000000, "2026-12-02T08:37:41.010000+00:00"); /* six digits, zeros kept */
	ISO(1709251199, 999999000, "2024-02-29T23:59:59.999999+00:00"); /* leap day */
	ISO(4102444800, 500000000, "2100-01-01T00:00:00.500000+00:00"); /* past 2038 */
}

/* Microsecond 0: the ".ffffff" part is left out, like datetime.isoformat(). */
static void test_time_iso_whole_second(void)
{
	ISO(0, 0, "1970-01-01T00:00:00+00:00");
	ISO(1796200661, 0, "2026-12-02T08:37:41+00:00");
	ISO(4102444800, 0, "2100-01-01T00:00:00+00:00");
}

/* Parse "YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00" to epoch seconds; -1 when it does not match. */
static double parse_iso(const char *s)
{
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
	if (!p)
		return -1;
	double frac = 0;
	if (*p == '.') {
		int digits = 0;
		long us = 0;
		for (p++; *p >= '0' && *p <= '9'; p++, digits++)
			us = us * 10 + (*p - '0');
		if (digits != 6)
			return -1;
		frac = us / 1e6;
	}
	if (strcmp(p, "+00:00") != 0)
		return -1;
	return (double)timegm(&tm) + frac;
}

static void test_time_now(void)
{
	char iso[40];
	double before = es_time_epoch();
	es_time_now_iso(iso);
	double after = es_time_epoch();
	double t = parse_iso(iso);
	if (!CHECK(t > 0))
		fprintf(stderr, "  iso: %s\n", iso);
	/* The ISO time lies between the two epoch readings (to the microsecond). */
	CHECK(t >= before - 1e-6 && t <= after + 1e-6);
	CHECK(before > 1.6e9); /* after 2020: seconds, not milli- or nanoseconds */
	double wall = (double)time(NULL);
	CHECK(after - wall < 2 && wall - after < 2);

	double m1 = es_time_mono(), m2 = es_time_mono();
	CHECK(m1 > 0);
	CHECK(m2 >= m1);
}

static void on_alarm(int sig) { (void)sig; }

static void test_sleep(void)
{
	double t0 = es_time_mono();
	es_sleep(0.2);
	double dt = es_time_mono() - t0;
	CHECK(dt >= 0.2);
	CHECK(dt < 2.0);

	/* Whole seconds and a fraction. */
	t0 = es_time_mono();
	es_sleep(1.25);
	dt = es_time_mono() - t0;
	CHECK(dt >= 1.25);
	CHECK(dt < 3.0);

	/* Zero and negative return at once. */
	t0 = es_time_mono();
	es_sleep(0);
	es_sleep(-5);
	CHECK(es_time_mono() - t0 < 0.1);

	/* A signal does not cut the sleep short. */
	struct sigaction sa, old;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm; /* no SA_RESTART: nanosleep returns EINTR */
	sigemptyset(&sa.sa_mask);
	CHECK_INT_EQ(sigaction(SIGALRM, &sa, &old), 0);
	struct itimerval it = { { 0, 50000 }, { 0, 50000 } }; /* every 50 ms */
	CHECK_INT_EQ(setitimer(ITIMER_REAL, &it, NULL), 0);
	t0 = es_time_mono();
	es_sleep(0.3);
	dt = es_time_mono() - t0;
	struct itimerval off = { { 0, 0 }, { 0, 0 } };
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	CHECK(dt >= 0.3);
	CHECK(dt < 3.0);
}

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

static void i64_ok_at(const char *s, int64_t want, const char *file, int line)
{
	int64_t v = -12345;
	if (!test_check_int(es_parse_i64(s, &v), 0, s, "0", file, line))
		return;
	test_check_int(v, want, s, "want", file, line);
}
#define I64_OK(s, want) i64_ok_at((s), (want), __FILE__, __LINE__)

static void i64_bad_at(const char *s, const char *file, int line)
{
	int64_t v = -12345;
	es_clear_error();
	test_check_int(es_parse_i64(s, &v), ES_EUSAGE, s ? s : "NULL", "ES_EUSAGE", file, line);
	/* No message: the caller reports with its own context. */
	test_check_str(es_last_error(), "", "es_last_error()", "\"\"", file, line);
}
#define I64_BAD(s) i64_bad_at((s), __FILE__, __LINE__)

static void test_parse_i64(void)
{
	I64_OK("0", 0);
	I64_OK("42", 42);
	I64_OK("-7", -7);
	I64_OK("1000000", 1000000);
	I64_OK("9223372036854775807", INT64_MAX);
	I64_OK("-9223372036854775808", INT64_MIN);

	I64_BAD(NULL);
	I64_BAD("");
	I64_BAD("12x");
	I64_BAD("x12");
	I64_BAD("1 ");
	I64_BAD(" 1");
	I64_BAD("\t1");
	I64_BAD("\n1");
	I64_BAD(" ");
	I64_BAD("1.0");
	I64_BAD("1e3");
	I64_BAD("0x10");
	I64_BAD("-");
	I64_BAD("+");
	I64_BAD("--1");
	I64_BAD("1-");
	I64_BAD("9223372036854775808");  /* INT64_MAX + 1 */
	I64_BAD("-9223372036854775809"); /* INT64_MIN - 1 */
	I64_BAD("99999999999999999999999999");
}

static void dbl_ok_at(const char *s, double want, const char *file, int line)
{
	double v = -12345;
	if (!test_check_int(es_parse_double(s, &v), 0, s, "0", file, line))
		return;
	if (!test_check(v == want, file, line, s))
		fprintf(stderr, "  got %.17g, want %.17g\n", v, want);
}
#define DBL_OK(s, want) dbl_ok_at((s), (want), __FILE__, __LINE__)

static void dbl_bad_at(const char *s, const char *file, int line)
{
	double v = -12345;
	es_clear_error();
	test_check_int(es_parse_double(s, &v), ES_EUSAGE, s ? s : "NULL", "ES_EUSAGE", file, line);
	test_check_str(es_last_error(), "", "es_last_error()", "\"\"", file, line);
}
#define DBL_BAD(s) dbl_bad_at((s), __FILE__, __LINE__)

static void test_parse_double(void)
{
	DBL_OK("0", 0.0);
	DBL_OK("1.5", 1.5);
	DBL_OK("-2.25", -2.25);
	DBL_OK("0.1", 0.1);
	DBL_OK(".5", 0.5);
	DBL_OK("10", 10.0);
	DBL_OK("1e3", 1000.0);
	DBL_OK("2.5E-3", 0.0025);
	DBL_OK("1.7976931348623157e308", 1.7976931348623157e308);

	DBL_BAD(NULL);
	DBL_BAD("");
	DBL_BAD("12x");
	DBL_BAD("1.5s");
	DBL_BAD("1 ");
	DBL_BAD(" 1");
	DBL_BAD("\t1.5");
	DBL_BAD(" ");
	DBL_BAD(".");
	DBL_BAD("-");
	DBL_BAD("e5");
	DBL_BAD("1,5");
	DBL_BAD("1e");
	DBL_BAD("nan");
	DBL_BAD("NaN");
	DBL_BAD("inf");
	DBL_BAD("-inf");
	DBL_BAD("Infinity");
	DBL_BAD("1e400");  /* overflows to infinity */
	DBL_BAD("-1e400");
	DBL_BAD("0x10");   /* not decimal */
	DBL_BAD("0x1p4");
}

static void test_env_name_is(void)
{
	CHECK_INT_EQ(es_env_name_is("PATH=/bin", "PATH"), 1);
	CHECK_INT_EQ(es_env_name_is("PATH=", "PATH"), 1);
	CHECK_INT_EQ(es_env_name_is("PATH", "PATH"), 1);
	CHECK_INT_EQ(es_env_name_is("PATH=a=b", "PATH"), 1);
	CHECK_INT_EQ(es_env_name_is("PATHX=1", "PATH"), 0);
	CHECK_INT_EQ(es_env_name_is("PAT=1", "PATH"), 0);
	CHECK_INT_EQ(es_env_name_is("path=1", "PATH"), 0);
	CHECK_INT_EQ(es_env_name_is("XPATH=1", "PATH"), 0);
	CHECK_INT_EQ(es_env_name_is("", "PATH"), 0);
}

static void test_launcher_identity(void)
{
	static const char *const yes[] = {
		"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4", "OMPI_MCA_btl=self",
		"PMIX_RANK=1", "PMIX_NAMESPACE=x", "PMI_RANK=0", "PMI_SIZE=2", "PRTE_MCA_x=1",
		"HYDRA_CONTROL_FD=3", "MV2_COMM_WORLD_RANK=0",
		"SLURM_PROCID=0", "SLURM_NTASKS=4", "SLURM_JOB_ID=123", "SLURM_LOCALID=0",
		"SLURMD_NODENAME=n1",
		"WORLD_SIZE=2", "RANK=0", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=1", "NODE_RANK=0",
		"GROUP_RANK=0", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500",
		"PAI_JOB_ID=j", "DLC_JOB_ID=j", "JOB_ID=j", "DJ_ELASTIC_RUN_ID=r",
		"DJ_ELASTIC_SHARD_CHILD=1", "RAY_ADDRESS=10.0.0.1:6379", "RAY_ADDRESS=", "RANK",
	};
	static const char *const no[] = {
		"PATH=/usr/bin", "HOME=/root", "PYTHONPATH=/x", "LD_LIBRARY_PATH=/l",
		"CUDA_VISIBLE_DEVICES=0", "OMP_NUM_THREADS=4", "RAY_TMPDIR=/tmp/ray",
		"RANKING=1", "MY_RANK=1", "XRANK=0", "WORLD_SIZES=3", "JOB_IDX=1", "XJOB_ID=1",
		"RAY_ADDRESS_FILE=x", "OMPI=1", "SLURM=1", "MASTER=1", "DJ_ELASTIC=1",
		"ompi_comm_world_rank=0", "rank=0", "",
	};
	int n_yes = 0, n_no = 0;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!CHECK_INT_EQ(es_env_is_launcher_identity(yes[i]), 1))
			fprintf(stderr, "  entry: %s\n", yes[i]);
		else
			n_yes++;
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (!CHECK_INT_EQ(es_env_is_launcher_identity(no[i]), 0))
			fprintf(stderr, "  entry: %s\n", no[i]);
		else
			n_no++;
	CHECK_INT_EQ(n_yes, sizeof(yes) / sizeof(yes[0]));
	CHECK_INT_EQ(n_no, sizeof(no) / sizeof(no[0]));
}

/* ESHARD_TEST_CRASH_AT=<name> ends the process with 99 at that point, and only there. */
static void test_crash_point(void)
{
#ifdef ESHARD_TEST_HOOKS
	unsetenv("ESHARD_TEST_CRASH_AT");
	es_crash_point("nowhere"); /* returns */
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0) {
		int devnull_ok = freopen("/dev/null", "w", stderr) != NULL;
		(void)devnull_ok;
		setenv("ESHARD_TEST_CRASH_AT", "here", 1);
		es_crash_point("elsewhere");
		es_crash_point("her");
		es_crash_point("here");
		_exit(0);
	}
	int st = 0;
	CHECK(pid > 0 && waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st));
	CHECK_INT_EQ(WEXITSTATUS(st), 99);
#endif
}

static void test_parse_iso(void)
{
	double t;
	CHECK_INT_EQ(es_time_parse_iso("1970-01-01T00:00:10+00:00", &t), 0);
	CHECK(t == 10);
	CHECK_INT_EQ(es_time_parse_iso("2026-12-02T08:37:05.108116+00:00", &t), 0);
	CHECK(fabs(t - 1796200625.108116) < 1e-5);
	CHECK_INT_EQ(es_time_parse_iso("2026-12-02T10:37:05.5+02:00", &t), 0);
	CHECK(fabs(t - 1796200625.5) < 1e-6);
	CHECK_INT_EQ(es_time_parse_iso("2026-12-02T08:37:05Z", &t), 0);
	CHECK(es_time_parse_iso("2026-12-02 08:37:05", &t) != 0);
	CHECK(es_time_parse_iso("2026-12-02T08:37:05+0000", &t) != 0);
	CHECK(es_time_parse_iso(NULL, &t) != 0);
}

static void test_edit_distance(void)
{
	static const struct {
		const char *a, *b;
		size_t d;
	} cases[] = {
		{ "", "", 0 },           { "", "run", 3 },        { "run", "", 3 },
		{ "status", "status", 0 }, { "stauts", "status", 1 }, /* one swap of neighbours */
		{ "job-dri", "job-dir", 1 }, { "statu", "status", 1 }, { "sttus", "status", 1 },
		{ "stXtus", "status", 1 }, { "kitten", "sitting", 3 }, { "ca", "abc", 3 },
		{ "ab", "ba", 1 },       { "abcd", "badc", 2 },   { "Status", "status", 1 },
		{ "whitespace_normalisation_mapper", "whitespace_normalization_mapper", 1 },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (!CHECK_INT_EQ(es_edit_distance(cases[i].a, cases[i].b), cases[i].d))
			fprintf(stderr, "  '%s' vs '%s'\n", cases[i].a, cases[i].b);
		CHECK_INT_EQ(es_edit_distance(cases[i].b, cases[i].a), cases[i].d); /* symmetric */
	}
	/* Past 255 bytes: the longer length, no table. */
	char big[400];
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	CHECK_INT_EQ(es_edit_distance(big, "x"), 399);
	CHECK_INT_EQ(es_edit_distance("xy", big), 399);
	big[255] = '\0';
	CHECK_INT_EQ(es_edit_distance(big, "x"), 254);
}

static void test_closest_name(void)
{
	const char *cmds[] = { "run", "prepare", "worker", "status", "retry", "merge", "verify" };
	size_t n = sizeof(cmds) / sizeof(cmds[0]);
	CHECK_STR_EQ(es_closest_name("stauts", cmds, n), "status");
	CHECK_STR_EQ(es_closest_name("verfy", cmds, n), "verify");
	CHECK_STR_EQ(es_closest_name("rnu", cmds, n), "run");
	CHECK_STR_EQ(es_closest_name("prepair", cmds, n), "prepare");
	CHECK_STR_EQ(es_closest_name("status", cmds, n), "status");
	/* Too far, or too short to tell: no suggestion. */
	CHECK(es_closest_name("report", cmds, n) == NULL);
	CHECK(es_closest_name("xyz", cmds, n) == NULL);
	CHECK(es_closest_name("rn", cmds, n) == NULL);
	CHECK(es_closest_name("", cmds, n) == NULL);
	CHECK(es_closest_name("status", cmds, 0) == NULL);
	/* Equals: the first one; NULL entries are skipped. */
	const char *ties[] = { NULL, "merge-a", "merge-b" };
	CHECK_STR_EQ(es_closest_name("merge-c", ties, 3), "merge-a");
	/* At most 3 edits, however long the word. */
	const char *ops[] = { "whitespace_normalization_mapper", "text_length_filter" };
	CHECK_STR_EQ(es_closest_name("whitespace_normalisation_mapper", ops, 2), "whitespace_normalization_mapper");
	CHECK_STR_EQ(es_closest_name("whitespace_normalizashun_mappr", ops, 2), NULL);
	CHECK_STR_EQ(es_closest_name("txt_length_fltr", ops, 2), "text_length_filter");
}

int main(void)
{
	test_time_iso();
	test_parse_iso();
	test_time_iso_whole_second();
	test_time_now();
	test_sleep();
	test_hostname();
	test_parse_i64();
	test_parse_double();
	test_env_name_is();
	test_launcher_identity();
	test_crash_point();
	test_edit_distance();
	test_closest_name();
	return test_done();
}
