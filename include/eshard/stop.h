/*
 * stop: the process's stop flag and the exit status a result maps to.
 */
#ifndef ESHARD_STOP_H
#define ESHARD_STOP_H

#include <signal.h>

/* The process's stop flag (set by its SIGTERM/SIGINT handler to the signal's number), which
 * long library steps (prepare's passes, merge, materialize) check so that a stop is acted on
 * at once: they then fail with ES_EINTR and "stopped by signal N", leaving nothing half-made
 * behind. NULL (the default) means never stopped. */
void es_set_stop_flag(volatile sig_atomic_t *flag);
/* The signal that asked the process to stop, or 0. */
int es_stop_signal(void);
/* ES_EINTR with "<what> stopped by signal N" when a stop was asked for, else 0. */
int es_check_stop(const char *what);
/* Exit status for a library result: 0 stays 0, a stop by signal N (ES_EINTR while the process
 * is stopping) 128+N, any other error 2 (docs/design.md#exit-codes). */
int es_exit_code(int rc);

#endif
