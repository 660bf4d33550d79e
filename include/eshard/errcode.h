/*
 * errcode: the ES_E* codes every library function returns.
 *
 * They live apart from log.h so that the modules below the logger (the clocks, the number
 * parsers) can return them without including the logger that uses their clocks.
 */
#ifndef ESHARD_ERRCODE_H
#define ESHARD_ERRCODE_H

enum es_code {
	ES_OK = 0,
	ES_EUSAGE = -2,    /* bad option or argument given by the user */
	ES_EINVAL = -3,    /* bad input data, recipe or job state */
	ES_EIO = -4,       /* a system call failed */
	ES_ENOMEM = -5,    /* out of memory or past a documented size cap */
	ES_EEXIST = -6,    /* something that must not exist does */
	ES_ENOENT = -7,    /* something that must exist does not */
	ES_EINTR = -8,     /* stopped by a signal */
	ES_EINTERNAL = -9, /* a broken invariant: a bug */
};

#endif
