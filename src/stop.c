#include "eshard/stop.h"
#include "eshard/log.h"

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

int es_exit_code(int rc)
{
	if (rc == 0)
		return 0;
	int sig = es_stop_signal();
	return rc == ES_EINTR && sig > 0 ? 128 + sig : 2;
}
