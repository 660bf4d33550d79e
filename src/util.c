#include "eshard/util.h"
#include "eshard/log.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void es_time_iso(const struct timespec *ts, char out[40])
{
	struct tm tm;
	time_t t = ts->tv_sec;
	gmtime_r(&t, &tm);
	long us = ts->tv_nsec / 1000;
	size_t n = strftime(out, 40, "%Y-%m-%dT%H:%M:%S", &tm);
	if (us)
		snprintf(out + n, 40 - n, ".%06ld+00:00", us);
	else
		snprintf(out + n, 40 - n, "+00:00");
}

void es_time_now_iso(char out[40])
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	es_time_iso(&ts, out);
}

int es_time_parse_iso(const char *s, double *out)
{
	if (!s)
		return ES_EINVAL;
	int Y, M, D, h, mi, sec, n = 0;
	if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &Y, &M, &D, &h, &mi, &sec, &n) != 6 || n != 19)
		return ES_EINVAL;
	const char *p = s + n;
	double frac = 0;
	if (*p == '.') {
		double scale = 0.1;
		p++;
		if (*p < '0' || *p > '9')
			return ES_EINVAL;
		while (*p >= '0' && *p <= '9') {
			frac += (*p - '0') * scale;
			scale /= 10;
			p++;
		}
	}
	long off = 0;
	if (*p == 'Z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int oh, om, k = 0;
		if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &k) != 2 || k != 5)
			return ES_EINVAL;
		off = (oh * 3600L + om * 60L) * (*p == '-' ? -1 : 1);
		p += 6;
	} else if (*p) {
		return ES_EINVAL;
	}
	if (*p)
		return ES_EINVAL;
	struct tm tm;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = Y - 1900;
	tm.tm_mon = M - 1;
	tm.tm_mday = D;
	tm.tm_hour = h;
	tm.tm_min = mi;
	tm.tm_sec = sec;
	time_t t = timegm(&tm);
	*out = (double)t - (double)off + frac;
	return 0;
}

double es_time_epoch(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

double es_time_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void es_sleep(double secs)
{
	if (!(secs > 0))
		return;
	/* A century is forever here; past time_t's range the cast below would be undefined. */
	if (secs > ES_SLEEP_MAX_SECS)
		secs = ES_SLEEP_MAX_SECS;
	struct timespec ts = { (time_t)secs, (long)((secs - floor(secs)) * 1e9) };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

const char *es_hostname(void)
{
	static char host[256];
	if (!host[0] && gethostname(host, sizeof(host) - 1) != 0)
		snprintf(host, sizeof(host), "unknown-host");
	return host;
}

/* strtoll and strtod skip leading white space; a strict parse of the whole string does not. */
static int bad_start(const char *s) { return !s || !*s || isspace((unsigned char)*s); }

int es_parse_i64(const char *s, int64_t *out)
{
	if (bad_start(s))
		return ES_EUSAGE;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || *end || end == s)
		return ES_EUSAGE;
	*out = v;
	return 0;
}

int es_parse_double(const char *s, double *out)
{
	/* Decimal only: strtod would also take hexadecimal floats ("0x10", "0x1p4"). */
	if (bad_start(s) || strpbrk(s, "xX"))
		return ES_EUSAGE;
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || *end || end == s || !isfinite(v))
		return ES_EUSAGE;
	*out = v;
	return 0;
}

int64_t es_i64_of_double(double d)
{
	if (d != d)
		return 0;
	if (d >= 0x1p63)
		return INT64_MAX;
	if (d < -0x1p63)
		return INT64_MIN;
	return (int64_t)d;
}

int es_format_u64(uint64_t v, char out[20])
{
	char tmp[20];
	int n = 0;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (int i = 0; i < n; i++)
		out[i] = tmp[n - 1 - i];
	return n;
}

#ifdef ESHARD_TEST_HOOKS
void es_crash_point(const char *name)
{
	const char *at = getenv("ESHARD_TEST_CRASH_AT");
	if (at && strcmp(at, name) == 0) {
		fprintf(stderr, "eshard test crash point '%s' reached\n", name);
		_exit(99);
	}
}
#endif

static volatile sig_atomic_t *stop_flag;

void es_set_stop_flag(volatile sig_atomic_t *flag)
{
	stop_flag = flag;
}

int es_stop_signal(void)
{
	return stop_flag ? (int)*stop_flag : 0;
}

int es_check_stop(const char *what)
{
	int sig = es_stop_signal();
	return sig ? es_error(ES_EINTR, "%s stopped by signal %d", what, sig) : 0;
}

/* 1 when dir is the build tree the library was compiled for: only a binary there may fall back
 * to the source tree's scripts/, so that an installed binary never depends on the checkout it
 * was built from (and a missing installed helper is noticed, not papered over). */
static int is_build_dir(const char *dir)
{
#if defined(ESHARD_SOURCE_DIR) && defined(ESHARD_BUILD_DIR)
	char *a = realpath(dir, NULL), *b = realpath(ESHARD_BUILD_DIR, NULL);
	int same = a && b && !strcmp(a, b);
	free(a);
	free(b);
	return same;
#else
	(void)dir;
	return 0;
#endif
}

const char *es_helper_path(const char *env_var, const char *name)
{
	static struct { char name[64]; char path[4200]; } found[8];
	const char *env = env_var ? getenv(env_var) : NULL;
	if (env && *env)
		return env;
	size_t k;
	for (k = 0; k < sizeof(found) / sizeof(found[0]) && found[k].name[0]; k++)
		if (!strcmp(found[k].name, name))
			return found[k].path[0] ? found[k].path : NULL;
	if (k == sizeof(found) / sizeof(found[0]) || strlen(name) >= sizeof(found[k].name))
		return NULL;
	snprintf(found[k].name, sizeof(found[k].name), "%s", name);
	found[k].path[0] = '\0';
	char exe[2048];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (!slash)
		return NULL;
	*slash = '\0';
	snprintf(found[k].path, sizeof(found[k].path), "%s/../share/eshard-mpi/%s", exe, name);
	if (access(found[k].path, R_OK) == 0)
		return found[k].path;
	found[k].path[0] = '\0';
#ifdef ESHARD_SOURCE_DIR
	if (is_build_dir(exe)) {
		snprintf(found[k].path, sizeof(found[k].path), "%s/scripts/%s", ESHARD_SOURCE_DIR, name);
		if (access(found[k].path, R_OK) == 0)
			return found[k].path;
		found[k].path[0] = '\0';
	}
#endif
	return NULL;
}

int es_env_name_is(const char *kv, const char *name)
{
	size_t n = strlen(name);
	return !strncmp(kv, name, n) && (kv[n] == '=' || kv[n] == '\0');
}

int es_env_is_launcher_identity(const char *kv)
{
	static const char *const prefixes[] = {
		"OMPI_", "PMIX_", "PMI_", "PRTE_", "HYDRA_", "MV2_COMM_WORLD_", "SLURM_", "SLURMD_",
		"MASTER_", "DJ_ELASTIC_",
	};
	static const char *const names[] = {
		"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "NODE_RANK",
		"ROLE_RANK", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PAI_JOB_ID", "DLC_JOB_ID", "JOB_ID",
		"RAY_ADDRESS",
	};
	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
		if (!strncmp(kv, prefixes[i], strlen(prefixes[i])))
			return 1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (es_env_name_is(kv, names[i]))
			return 1;
	return 0;
}

size_t es_edit_distance(const char *a, const char *b)
{
	enum { MAXLEN = 255 };
	size_t la = strlen(a), lb = strlen(b);
	if (la > MAXLEN || lb > MAXLEN)
		return la > lb ? la : lb;
	/* Three rows of the dynamic programme: the one before last (for transpositions), the last
	 * and the current one. */
	size_t rows[3][MAXLEN + 1];
	size_t *pp = rows[0], *p = rows[1], *c = rows[2];
	for (size_t j = 0; j <= lb; j++)
		p[j] = j;
	for (size_t i = 1; i <= la; i++) {
		c[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			size_t cost = a[i - 1] != b[j - 1];
			size_t best = p[j - 1] + cost;                 /* substitute (or keep) */
			if (p[j] + 1 < best)
				best = p[j] + 1;                       /* delete from a */
			if (c[j - 1] + 1 < best)
				best = c[j - 1] + 1;                   /* insert into a */
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && pp[j - 2] + 1 < best)
				best = pp[j - 2] + 1;                  /* swap two neighbours */
			c[j] = best;
		}
		size_t *t = pp;
		pp = p;
		p = c;
		c = t;
	}
	return p[lb];
}

const char *es_closest_name(const char *word, const char *const *names, size_t n)
{
	size_t limit = strlen(word) / 3;
	if (limit > 3)
		limit = 3;
	const char *best = NULL;
	size_t best_d = limit + 1;
	for (size_t i = 0; i < n; i++) {
		if (!names[i])
			continue;
		size_t d = es_edit_distance(word, names[i]);
		if (d < best_d) {
			best = names[i];
			best_d = d;
		}
	}
	return best;
}
