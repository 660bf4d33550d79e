#include "eshard/events.h"
#include "eshard/clock.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "json.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int es_events_open(struct es_events *e, const char *job_dir, const char *run_id)
{
	char tok[33];
	memset(e, 0, sizeof(*e));
	e->fd = -1;
	e->path = (struct es_buf)ES_BUF_INIT;
	e->run_id = run_id;
	if (es_fs_token(tok))
		return 0;
	struct es_buf dir = ES_BUF_INIT;
	es_log_quiet_begin();
	int rc = es_jobpath_events(&e->path, job_dir, es_hostname(), (long)getpid(), tok);
	if (!rc)
		rc = es_jobpath_join(&dir, job_dir, ES_JOB_STATE);
	if (!rc)
		rc = es_fs_mkdir_nofollow(dir.data, 0755);
	/* Job folders of the reference have no events folder: make it (never through a link). The
	 * log is a new file of this process alone (created exclusively, so never through a link). */
	if (!rc)
		rc = es_jobpath_join(&dir, job_dir, ES_JOB_EVENTS);
	if (!rc)
		rc = es_fs_mkdir_nofollow(dir.data, 0755);
	if (!rc)
		rc = es_fs_open_new(e->path.data, 0644, 0, &e->fd);
	es_log_quiet_end();
	es_buf_free(&dir);
	/* O_APPEND: one write() per line lands whole at the end, whoever else appends. */
	if (!rc && fcntl(e->fd, F_SETFL, O_APPEND) != 0) {
		close(e->fd);
		rc = ES_EIO;
	}
	if (rc)
		e->fd = -1;
	if (e->fd < 0)
		es_warning("cannot open event log '%s'; events of this worker are not recorded", e->path.data);
	return 0;
}

void es_events_write(struct es_events *e, const struct es_event *ev)
{
	if (e->fd < 0)
		return;
	char iso[40];
	es_time_now_iso(iso);
	cJSON *o = cJSON_CreateObject();
	es_json_set_str(o, "event", ev->event);
	es_json_set_str(o, "host", es_hostname());
	es_json_set_int(o, "pid", (int64_t)getpid());
	es_json_set_float(o, "time", es_time_epoch());
	es_json_set_str(o, "at", iso);
	if (ev->shard)
		es_json_set_str(o, "shard", ev->shard);
	if (ev->attempt > 0)
		es_json_set_int(o, "attempt", ev->attempt);
	if (ev->token)
		es_json_set_str(o, "token", ev->token);
	if (ev->rows >= 0)
		es_json_set_int(o, "rows", ev->rows);
	if (ev->bytes >= 0)
		es_json_set_int(o, "bytes", ev->bytes);
	if (ev->duration >= 0)
		es_json_set_float(o, "duration", ev->duration);
	if (ev->detail)
		es_json_set_str(o, "detail", ev->detail);
	if (e->run_id)
		es_json_set_str(o, "run_id", e->run_id);
	struct es_buf line = ES_BUF_INIT;
	if (!es_json_dump(o, 0, &line) && write(e->fd, line.data, line.len) != (ssize_t)line.len)
		es_warning("cannot append to event log '%s'", e->path.data);
	es_buf_free(&line);
	cJSON_Delete(o);
}

void es_events_close(struct es_events *e)
{
	if (e->fd >= 0)
		close(e->fd);
	e->fd = -1;
	es_buf_free(&e->path);
}
