/*
 * crash: the crash points of test builds, where the crash tests kill a process on purpose.
 *
 * Test builds (-DESHARD_TEST_HOOKS=ON) only: ESHARD_TEST_CRASH_AT=<name> makes the process
 * _exit(99) at that point. Other builds compile no crash point at all, not even its name.
 */
#ifndef ESHARD_CRASH_H
#define ESHARD_CRASH_H

#ifdef ESHARD_TEST_HOOKS
void es_crash_point(const char *name);
#else
#define es_crash_point(name) ((void)0)
#endif

#endif
