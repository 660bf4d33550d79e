/*
 * host: the name of the node this process runs on, as records, events and logs show it.
 */
#ifndef ESHARD_HOST_H
#define ESHARD_HOST_H

/* gethostname(), read once and kept; "unknown-host" when it fails. */
const char *es_hostname(void);

#endif
