#include "eshard/host.h"

#include <stdio.h>
#include <unistd.h>

const char *es_hostname(void)
{
	static char host[256];
	if (!host[0] && gethostname(host, sizeof(host) - 1) != 0)
		snprintf(host, sizeof(host), "unknown-host");
	return host;
}
