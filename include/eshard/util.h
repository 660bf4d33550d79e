/*
 * util: clocks, host names and strict number parsing shared by every module.
 */
#ifndef ESHARD_UTIL_H
#define ESHARD_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <signal.h>
#include <time.h>

/* "2026-12-02T08:37:05.108116+00:00" (Python's datetime.isoformat(); ".ffffff" left out when
 * the microsecond is 0). */
void es_time_iso(const struct timespec *ts, char out[40]);
void es_time_now_iso(char out[40]);
/* Parse a Python isoformat() time ("2026-12-02T08:37:05.108116+00:00", any offset, optional
 * fraction, or "Z") into Unix seconds. 0 or ES_EINVAL (no message). */
int es_time_parse_iso(const char *s, double *out);
double es_time_epoch(void);           /* wall clock, seconds */
double es_time_mono(void);            /* monotonic clock, seconds */
/* Sleep secs seconds (retried on EINTR); nothing for secs <= 0 or NaN, at most
 * ES_SLEEP_MAX_SECS (a century: any longer wait is forever, and fits no timespec). */
#define ES_SLEEP_MAX_SECS 3.2e9
void es_sleep(double secs);
const char *es_hostname(void);        /* cached gethostname() */
/* Strict decimal parse of the whole string; 0 or ES_EUSAGE (no message). */
int es_parse_i64(const char *s, int64_t *out);
int es_parse_double(const char *s, double *out);
/* d truncated toward zero as an int64, saturated at INT64_MIN/INT64_MAX when d is past them
 * (a plain cast of such a double, or of 2^63 = (double)INT64_MAX, is undefined); NaN gives 0.
 * Callers that must refuse NaN check it first. */
int64_t es_i64_of_double(double d);
/* The decimal digits of v into out, without a NUL; returns how many (1 to 20). */
int es_format_u64(uint64_t v, char out[20]);
/* 1 when the environment entry kv ("NAME=value") tells a launcher's identity that a child
 * must not see (docs/design.md#a-clean-child-environment): Open MPI, PMIx/PMI, Slurm, torch-style
 * WORLD_SIZE and RANK, MASTER_*, the job ids that make newer Data-Juicer versions start an elastic
 * run of their own (PAI_JOB_ID, DLC_JOB_ID, JOB_ID, DJ_ELASTIC_*), and an inherited RAY_ADDRESS. */
int es_env_is_launcher_identity(const char *kv);
/* Where a helper script shipped with eshard-mpi is (dj_op_kinds.py, dj_runner.py): the
 * environment variable env_var when set; else <dir of the binary>/../share/eshard-mpi/<name>
 * (an installed eshard-mpi: `cmake --install`, the .deb); else, for a binary that runs from
 * the build tree it was compiled in, <source>/scripts/<name>. NULL when none exists: an
 * installed binary never looks into the source tree. The string stays valid for the life of
 * the process. */
const char *es_helper_path(const char *env_var, const char *name);
/* The optimal string alignment distance (Levenshtein plus transpositions of neighbours, each
 * edit counting 1) between a and b, byte by byte; a string longer than 255 bytes is as far
 * from every other string as its length. */
size_t es_edit_distance(const char *a, const char *b);
/* The name of names[0..n) closest to word by es_edit_distance, the first of equals, when it is
 * close enough to be what was meant (at most a third of word's length, and at most 3, edits);
 * else NULL. For "did you mean" hints. */
const char *es_closest_name(const char *word, const char *const *names, size_t n);
/* 1 when kv's name is name. */
int es_env_name_is(const char *kv, const char *name);
/* The process's stop flag (set by its SIGTERM/SIGINT handler to the signal's number), which
 * long library steps (prepare's passes, merge, materialize) check so that a stop is acted on
 * at once: they then fail with ES_EINTR and "stopped by signal N", leaving nothing half-made
 * behind. NULL (the default) means never stopped. */
void es_set_stop_flag(volatile sig_atomic_t *flag);
/* The signal that asked the process to stop, or 0. */
int es_stop_signal(void);
/* ES_EINTR with "<what> stopped by signal N" when a stop was asked for, else 0. */
int es_check_stop(const char *what);

/* Test builds (-DESHARD_TEST_HOOKS=ON) only: ESHARD_TEST_CRASH_AT=<name> makes the process
 * _exit(99) at that point. Other builds compile no crash point at all, not even its name. */
#ifdef ESHARD_TEST_HOOKS
void es_crash_point(const char *name);
#else
#define es_crash_point(name) ((void)0)
#endif

#endif
