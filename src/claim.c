#include "eshard/claim.h"
#include "eshard/clock.h"
#include "eshard/crash.h"
#include "eshard/fs.h"
#include "eshard/host.h"
#include "eshard/jobpath.h"
#include "eshard/log.h"
#include "eshard/proc.h"
#include "claim_parts.h"
#include "json.h"

#include <dirent.h>
#include <math.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* The lock file: reading and holding it, the lease rule, the claim, heartbeat and release
 * (docs/job-folder.md#locks-and-fences). Fences, takeovers and backups are in the other
 * claim_*.c files (src/claim_parts.h). */

static uint64_t fnv1a(const char *p, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

int es_claim_marker_exists(const struct es_manifest *m, const char *kind, const char *shard_id)
{
	struct es_buf p = ES_BUF_INIT;
	int rc = es_jobpath_record(&p, m->job_dir, kind, shard_id);
	if (!rc)
		rc = es_fs_exists_fresh(p.data);
	es_buf_free(&p);
	return rc;
}

int es_claimer_init(struct es_claimer *c, const struct es_manifest *m, const struct es_policy *p)
{
	memset(c, 0, sizeof(*c));
	c->m = m;
	c->policy = *p;
	c->obs = calloc(m->n_shards ? m->n_shards : 1, sizeof(*c->obs));
	if (!c->obs)
		return es_error(ES_ENOMEM, "out of memory");
	for (size_t i = 0; i < m->n_shards; i++)
		c->obs[i].claimed_at_epoch = c->obs[i].done_secs = -1;
	return 0;
}

void es_claimer_free(struct es_claimer *c)
{
	free(c->obs);
	c->obs = NULL;
	free(c->attempt_text);
	c->attempt_text = NULL;
}

char *es_claim_take_attempt(struct es_claimer *c, size_t *len)
{
	char *text = c->attempt_text;
	double window = c->policy.lease_secs;
	if (c->policy.lock_timeout_secs > 0 && (double)c->policy.lock_timeout_secs < window)
		window = (double)c->policy.lock_timeout_secs;
	*len = c->attempt_text_len;
	c->attempt_text = NULL;
	if (text && es_time_mono() - c->attempt_text_mono >= window / 4) {
		free(text);
		text = NULL;
	}
	return text;
}

/* Read a whole lock (at most 1 MiB) from an open descriptor whose fstat() gave size. */
static int read_fd(int fd, struct es_buf *b, off_t size, const char *what)
{
	if (lseek(fd, 0, SEEK_SET) < 0)
		return es_error_errno(ES_EIO, "cannot seek '%s'", what);
	return es_fs_read_fd_sized(fd, b, (size_t)1 << 20, size, what);
}

/* Open a lock (O_RDONLY or O_RDWR): 0 with *fd, 1 when there is none, negative after
 * es_error(). A symbolic link (planted: eshard-mpi never makes one) is refused, so that nothing
 * is written through it out of the job folder, and so is anything but a regular file: a FIFO
 * would block the open or the read for ever. */
int es_claim_open_lock(const char *path, int flags, int *fd)
{
	return es_fs_open_read(path, flags | O_NOFOLLOW, fd);
}

int es_claim_same_file(int fd, const char *path, struct stat *fst)
{
	struct stat pst;
	if (fstat(fd, fst) != 0)
		return 0;
	if (stat(path, &pst) != 0)
		return 0;
	return pst.st_dev == fst->st_dev && pst.st_ino == fst->st_ino;
}

static void copy_str(char *out, size_t n, const cJSON *doc, const char *key)
{
	const char *v = es_json_get_str(doc, key);
	snprintf(out, n, "%s", v ? v : "");
}

/* Fill li from an open lock: fstat, then the content (parsed quietly); *doc gets the parsed
 * object when doc is not NULL (NULL when unreadable). */
int es_claim_lock_info_fd(int fd, const char *path, struct es_lock_info *li, cJSON **doc)
{
	struct stat st;
	struct es_buf content = ES_BUF_INIT;
	memset(li, 0, sizeof(*li));
	li->claimed_at_epoch = li->terminal_at_epoch = -1;
	if (doc)
		*doc = NULL;
	if (fstat(fd, &st) != 0)
		return es_error_errno(ES_EIO, "cannot stat lock '%s'", path);
	int rc = read_fd(fd, &content, S_ISREG(st.st_mode) ? st.st_size : -1, path);
	if (rc) {
		es_buf_free(&content);
		return rc;
	}
	li->exists = 1;
	li->dev = st.st_dev;
	li->ino = st.st_ino;
	li->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
	li->content_hash = fnv1a(content.data, content.len);
	es_log_quiet_begin();
	cJSON *l = es_json_parse(content.data, content.len, path);
	es_log_quiet_end();
	es_buf_free(&content);
	if (!cJSON_IsObject(l)) {
		cJSON_Delete(l);
		return 0;
	}
	li->readable = 1;
	copy_str(li->token, sizeof(li->token), l, "token");
	copy_str(li->hostname, sizeof(li->hostname), l, "hostname");
	copy_str(li->attempt_dir, sizeof(li->attempt_dir), l, "attempt_dir");
	es_json_get_i64(l, "attempt_number", &li->attempt_number);
	li->has_pid = !es_json_get_i64(l, "pid", &li->pid);
	li->has_heartbeat = cJSON_GetObjectItemCaseSensitive(l, "heartbeat") != NULL;
	es_json_get_i64(l, "heartbeat", &li->heartbeat);
	if (es_json_get_num(l, "lease_secs", &li->lease_secs))
		li->lease_secs = 0;
	copy_str(li->maker, sizeof(li->maker), l, "maker");
	if (strlen(li->maker) != 24 || strspn(li->maker, "0123456789abcdef") != 24)
		li->maker[0] = '\0';
	const char *state = es_json_get_str(l, "status");
	snprintf(li->state, sizeof(li->state), "%s", state ? state : "running");
	li->terminal = !strcmp(li->state, "done") || !strcmp(li->state, "failed");
	copy_str(li->terminal_path, sizeof(li->terminal_path), l, "terminal_path");
	double t;
	if (!es_time_parse_iso(es_json_get_str(l, "terminal_at"), &t))
		li->terminal_at_epoch = t;
	copy_str(li->record_host, sizeof(li->record_host), cJSON_GetObjectItemCaseSensitive(l, "record"), "hostname");
	if (!es_json_get_num(l, "claimed_at_epoch", &t) || !es_time_parse_iso(es_json_get_str(l, "claimed_at"), &t))
		li->claimed_at_epoch = t;
	if (doc)
		*doc = l;
	else
		cJSON_Delete(l);
	return 0;
}

int es_claim_lock_read(const char *path, struct es_lock_info *li)
{
	memset(li, 0, sizeof(*li));
	li->claimed_at_epoch = li->terminal_at_epoch = -1;
	int fd, rc = es_claim_open_lock(path, O_RDONLY, &fd);
	if (rc)
		return rc == 1 ? 0 : rc;
	rc = es_claim_lock_info_fd(fd, path, li, NULL);
	close(fd);
	return rc;
}

int es_claim_lock_hold(const char *path, int *fd_out, struct es_lock_info *li)
{
	*fd_out = -1;
	memset(li, 0, sizeof(*li));
	li->claimed_at_epoch = li->terminal_at_epoch = -1;
	/* O_RDWR: an exclusive flock() emulated with fcntl() locks on NFS needs it (es_claim_try_takeover). */
	int fd, rc = es_claim_open_lock(path, O_RDWR, &fd);
	if (rc)
		return rc;
	while (flock(fd, LOCK_EX) != 0) {
		if (errno == EINTR)
			continue;
		rc = es_error_errno(ES_EIO, "cannot lock '%s'", path);
		close(fd);
		return rc;
	}
	struct stat st;
	if (!es_claim_same_file(fd, path, &st)) {
		/* Moved or replaced while we waited for it: look again. */
		es_claim_unlock_close(fd);
		return es_claim_lock_hold(path, fd_out, li);
	}
	rc = es_claim_lock_info_fd(fd, path, li, NULL);
	if (rc) {
		es_claim_unlock_close(fd);
		return rc;
	}
	*fd_out = fd;
	return 0;
}

void es_claim_lock_unhold(int fd)
{
	if (fd >= 0)
		es_claim_unlock_close(fd);
}

double es_claim_lease_of(const struct es_lock_info *li, double job_lease)
{
	if (!li->readable)
		return job_lease;
	if (!li->has_heartbeat)
		return 0;
	return li->lease_secs > job_lease ? li->lease_secs : job_lease;
}

int es_claim_lock_stale(const struct es_lock_info *li, double age_secs, double unchanged_secs,
			const struct es_policy *p)
{
	double lease = es_claim_lease_of(li, p->lease_secs);
	return age_secs > (double)p->lock_timeout_secs || (lease > 0 && unchanged_secs >= lease);
}

int es_claim_count_failures(const char *job_dir, const char *shard_id, int *failures, int *folders)
{
	struct es_buf root = ES_BUF_INIT, p = ES_BUF_INIT;
	if (failures)
		*failures = 0;
	*folders = 0;
	int rc = es_jobpath_attempts(&root, job_dir, shard_id);
	DIR *d = rc ? NULL : opendir(root.data);
	if (!d) {
		rc = rc ? rc : errno == ENOENT ? 0 : es_error_errno(ES_EIO, "cannot read '%s'", root.data);
		es_buf_free(&root);
		return rc;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		struct stat st;
		es_buf_reset(&p);
		es_buf_printf(&p, "%s/%s", root.data, e->d_name);
		if (stat(p.data, &st) != 0 || !S_ISDIR(st.st_mode))
			continue;
		(*folders)++;
		if (!failures)
			continue;
		es_buf_adds(&p, "/" ES_ATTEMPT_JSON);
		cJSON *a = NULL;
		es_log_quiet_begin();
		if (!es_json_load(p.data, &a) && cJSON_IsObject(a)) {
			const char *s = es_json_get_str(a, "status");
			if (s && (!strcmp(s, "failed") || !strcmp(s, "stale")))
				(*failures)++;
		}
		es_log_quiet_end();
		cJSON_Delete(a);
	}
	closedir(d);
	es_buf_free(&root);
	es_buf_free(&p);
	return 0;
}

cJSON *es_claim_lock_doc(const struct es_claimer *c, const char *shard_id)
{
	cJSON *l = cJSON_CreateObject();
	es_json_set_str(l, "attempt_dir", c->attempt_rel);
	es_json_set_int(l, "attempt_number", c->attempt_number);
	es_json_set_str(l, "claimed_at", c->claimed_at);
	es_json_set_float(l, "claimed_at_epoch", c->claimed_at_epoch);
	es_json_set_str(l, "hostname", es_hostname());
	es_json_set_int(l, "pid", (int64_t)getpid());
	es_json_set_str(l, "shard_id", shard_id);
	es_json_set_str(l, "token", c->token);
	/* eshard-mpi fields, which readers of the reference ignore: the lock's state (running,
	 * then a terminal fence), the lease, and what names this process in the tokens of its
	 * temporaries, so that whoever takes the lock over or fences it in our place removes those
	 * we left, whatever their age (docs/job-folder.md#debris). */
	char maker[25];
	es_fs_temp_maker(maker);
	es_json_set_str(l, "status", "running");
	es_json_set_int(l, "heartbeat", c->heartbeat);
	es_json_set_float(l, "lease_secs", c->policy.lease_secs);
	es_json_set_str(l, "maker", maker);
	return l;
}

/* Open the lock, flock it, and check it is the one at the path, still running, and carries
 * token. 0 with *fd_out (and *doc when asked) when we own it; 1 when not (gone, replaced,
 * another token, or already a terminal fence); 2 when busy (nonblock); negative on error. */
int es_claim_lock_owned(const char *lock_path, const char *token, int nonblock, int *fd_out, cJSON **doc)
{
	*fd_out = -1;
	int fd, rc = es_claim_open_lock(lock_path, O_RDWR, &fd);
	if (rc)
		return rc;
	while (flock(fd, LOCK_EX | (nonblock ? LOCK_NB : 0)) != 0) {
		if (errno == EINTR)
			continue;
		int busy = errno == EWOULDBLOCK;
		close(fd);
		return busy ? 2 : es_error_errno(ES_EIO, "cannot lock '%s'", lock_path);
	}
	struct stat st;
	struct es_lock_info li;
	cJSON *l = NULL;
	rc = 1;
	/* Not the one at the path (moved or replaced): not ours. A read error (ESTALE, EIO) is an
	 * error, not a lost lease: a heartbeat must not abort a live shard over a hiccup. */
	if (es_claim_same_file(fd, lock_path, &st) && (rc = es_claim_lock_info_fd(fd, lock_path, &li, &l)) == 0)
		rc = li.readable && !li.terminal && !strcmp(li.token, token) ? 0 : 1;
	if (rc) {
		cJSON_Delete(l);
		flock(fd, LOCK_UN);
		close(fd);
		return rc;
	}
	if (doc)
		*doc = l;
	else
		cJSON_Delete(l);
	*fd_out = fd;
	return 0;
}

void es_claim_unlock_close(int fd)
{
	flock(fd, LOCK_UN);
	close(fd);
}

/* A fence seen: the shard is terminal; a done one tells how long it took and who completed it. */
static void seen_terminal(struct es_lease_obs *o, const struct es_lock_info *li)
{
	o->terminal = 1;
	o->running = 0;
	if (strcmp(li->state, "done"))
		return;
	o->done = 1;
	if (li->terminal_at_epoch > 0 && li->claimed_at_epoch > 0 && li->terminal_at_epoch >= li->claimed_at_epoch)
		o->done_secs = li->terminal_at_epoch - li->claimed_at_epoch;
	snprintf(o->host, sizeof(o->host), "%s", li->record_host[0] ? li->record_host : li->hostname);
}

/* A live running lock seen: who holds it since when, and when we saw it. */
static void seen_running(struct es_lease_obs *o, const struct es_lock_info *li)
{
	o->running = li->readable;
	o->claimed_at_epoch = li->claimed_at_epoch;
	o->running_seen_mono = es_time_mono();
	snprintf(o->host, sizeof(o->host), "%s", li->hostname);
	snprintf(o->token, sizeof(o->token), "%s", li->token);
}

void es_claim_seen(const struct es_claimer *c, size_t i, struct es_claim_seen *s)
{
	const struct es_lease_obs *o = &c->obs[i];
	s->terminal = o->terminal || o->listed_done;
	s->running = o->running && !s->terminal;
	s->claimed_at_epoch = s->running ? o->claimed_at_epoch : -1;
	s->done_secs = o->done_secs;
	s->host = o->host;
	s->token = s->running ? o->token : "";
	s->running_seen_mono = s->running ? o->running_seen_mono : -1;
}

int es_claim_seen_done(const struct es_claimer *c, size_t i)
{
	return (c->obs[i].terminal && c->obs[i].done) || c->obs[i].listed_done;
}

int es_claim_listed_only(const struct es_claimer *c, size_t i)
{
	return c->obs[i].listed_done && !c->obs[i].terminal;
}

size_t es_claim_unknown(const struct es_claimer *c)
{
	size_t n = 0;
	for (size_t i = 0; i < c->m->n_shards; i++)
		n += !c->obs[i].terminal && !c->obs[i].listed_done && !es_claim_trusts_running(c, i);
	return n;
}

/* The shard whose done record is called name in state/done: its index, or -1. Ids are
 * part-<index>-of-<count> (docs/job-folder.md), so the index is read from the name and checked
 * against the manifest's id. */
static long listed_shard(const struct es_manifest *m, const char *name)
{
	size_t n = strlen(name);
	if (n < 6 || strncmp(name, "part-", 5) || strcmp(name + n - 5, ".json"))
		return -1;
	char *end;
	errno = 0;
	unsigned long long k = strtoull(name + 5, &end, 10);
	if (errno || end == name + 5 || k >= m->n_shards)
		return -1;
	const char *id = m->shards[k].id;
	size_t idn = strlen(id);
	return idn == n - 5 && !strncmp(name, id, idn) ? (long)k : -1;
}

int es_claim_learn_done(struct es_claimer *c)
{
	struct es_buf dir = ES_BUF_INIT;
	struct es_strv names = ES_STRV_INIT;
	int rc = es_jobpath_join(&dir, c->m->job_dir, ES_JOB_DONE);
	if (!rc)
		rc = es_fs_list_dir(dir.data, &names);
	int learned = 0;
	for (size_t k = 0; !rc && k < names.n; k++) {
		long i = listed_shard(c->m, names.v[k]);
		if (i >= 0 && !c->obs[i].listed_done && !(c->obs[i].terminal && c->obs[i].done)) {
			c->obs[i].listed_done = 1;
			learned++;
		}
	}
	es_strv_free(&names);
	es_buf_free(&dir);
	return rc ? rc : learned;
}

/* What the lock says before a claim, read with one open() that the file server answers: 1
 * when there is none (free as far as this client can tell; the exclusive create decides), 0
 * when it is a terminal fence (remembered) or a live or busy running lock, negative on error.
 * A running lock that is stale is taken over (1) or, when the shard's record is visible, turned
 * into its fence (0). */
static int probe_lock(struct es_claimer *c, size_t i, const char *lock_path)
{
	struct es_lock_info li;
	int rc = es_claim_lock_read(lock_path, &li);
	if (rc)
		return rc;
	struct es_lease_obs *o = &c->obs[i];
	o->running = 0;
	if (!li.exists) {
		o->valid = 0;
		return 1;
	}
	if (li.terminal) {
		seen_terminal(o, &li);
		return 0;
	}
	if (!es_claim_observe(c, i, &li)) {
		seen_running(o, &li);
		return 0;
	}
	rc = es_claim_try_takeover(c, i, lock_path);
	return rc == 1 ? 1 : rc < 0 ? rc : 0;
}

/* After a lost exclusive create: read the lock that won, to learn a terminal state, or that it
 * runs (the winner's fresh lock). */
static void learn_winner(struct es_claimer *c, size_t i, const char *lock_path)
{
	struct es_lock_info li;
	es_log_quiet_begin();
	c->obs[i].running = 0;
	if (!es_claim_lock_read(lock_path, &li) && li.exists) {
		if (li.terminal)
			seen_terminal(&c->obs[i], &li);
		else if (!es_claim_observe(c, i, &li))
			seen_running(&c->obs[i], &li);
	}
	es_log_quiet_end();
}

/* Step 4 at claim time, holding the lock: the failed record, then the failed fence. */
static int publish_limit(struct es_claimer *c, size_t i, int failures)
{
	cJSON *f = cJSON_CreateObject();
	char now[40];
	es_time_now_iso(now);
	es_json_set_str(f, "failed_at", now);
	es_json_set_int(f, "failures", failures);
	es_json_set_str(f, "reason", "retry limit reached before claim");
	es_json_set_str(f, "shard_id", c->m->shards[i].id);
	es_json_set_str(f, "status", "failed");
	es_json_set_str(f, "token", c->token);
	struct es_buf rec = ES_BUF_INIT;
	int published = 0;
	int rc = es_json_dump(f, 1, &rec);
	if (!rc)
		rc = es_claim_publish(c, i, c->token, "failed", rec.data, rec.len, NULL, NULL, &published);
	es_buf_free(&rec);
	cJSON_Delete(f);
	return rc < 0 ? rc : ES_CLAIM_FAILED_LIMIT;
}

int es_claim_set_attempt_rel(struct es_claimer *c, const char *id)
{
	struct es_buf rel = ES_BUF_INIT;
	int rc = es_jobpath_attempt(&rel, NULL, id, c->attempt_number, c->token);
	if (!rc && rel.len >= sizeof(c->attempt_rel))
		rc = es_error(ES_EINVAL, "attempt folder name too long (%zu bytes, at most %zu) for shard '%s'", rel.len,
			      sizeof(c->attempt_rel) - 1, id);
	if (!rc)
		memcpy(c->attempt_rel, rel.data, rel.len + 1);
	es_buf_free(&rel);
	return rc;
}

/* Steps 5 and 6: the attempt number and token, then the exclusive create. The attempt folder
 * itself is made only once the lock is ours: the reference made it before the O_EXCL create, so
 * every loser of a race briefly added a folder that the winner counted, and a shard's first
 * attempt could be numbered 0016 when 16 workers raced for it. 0 with *l set (ours), 1 lost. */
static int create_lock(struct es_claimer *c, size_t i, const char *lock_path, int folders, cJSON **l)
{
	const char *id = c->m->shards[i].id;
	int rc = es_fs_token(c->token);
	if (rc)
		return rc;
	c->attempt_number = folders + 1;
	c->heartbeat = 0;
	c->backup_of[0] = '\0';
	if ((rc = es_claim_set_attempt_rel(c, id)) != 0)
		return rc;
	es_time_now_iso(c->claimed_at);
	c->claimed_at_epoch = es_time_epoch();
	*l = es_claim_lock_doc(c, id);
	struct es_buf line = ES_BUF_INIT;
	rc = es_json_dump(*l, 0, &line);
	if (!rc)
		rc = es_fs_create_exclusive(lock_path, line.data, line.len);
	es_buf_free(&line);
	if (rc) {
		cJSON_Delete(*l);
		*l = NULL;
	}
	return rc;
}

/* attempt.json's command and export path, when the owner knows them at the claim
 * (es_claimer.attempt_command). */
static void add_command(struct es_claimer *c, size_t i, cJSON *a)
{
	struct es_strv argv = ES_STRV_INIT;
	struct es_buf rel = ES_BUF_INIT;
	if (c->attempt_command && !c->attempt_command(c->attempt_command_arg, i, &argv, &rel)) {
		es_json_set(a, "command", es_json_str_array(argv.v, argv.n));
		es_json_set_str(a, "ray_export_path", rel.data ? rel.data : "");
	}
	es_strv_free(&argv);
	es_buf_free(&rel);
}

/* The attempt folder (its leaf is new: the name holds a fresh token) and its attempt.json,
 * from the lock document l (without the lease fields and the maker, which only a lock
 * carries). */
int es_claim_make_attempt(struct es_claimer *c, size_t i, cJSON *l)
{
	const struct es_manifest *m = c->m;
	struct es_buf ad = ES_BUF_INIT, parent = ES_BUF_INIT, text = ES_BUF_INIT;
	int rc = es_jobpath_attempts(&parent, m->job_dir, m->shards[i].id);
	if (!rc)
		rc = es_jobpath_join(&ad, m->job_dir, c->attempt_rel);
	if (!rc)
		rc = es_fs_mkdir_nofollow(parent.data, 0755);
	if (!rc && mkdir(ad.data, 0755) != 0)
		rc = es_error_errno(ES_EIO, "cannot create attempt folder '%s'", ad.data);
	if (!rc) {
		es_json_set_str(l, "input_path", m->shards[i].path);
		cJSON_DeleteItemFromObjectCaseSensitive(l, "heartbeat");
		cJSON_DeleteItemFromObjectCaseSensitive(l, "lease_secs");
		cJSON_DeleteItemFromObjectCaseSensitive(l, "maker");
		add_command(c, i, l);
		es_buf_adds(&ad, "/" ES_ATTEMPT_JSON);
		rc = es_json_dump(l, 1, &text);
		if (!rc)
			rc = es_fs_write_atomic(ad.data, text.data, text.len);
	}
	free(c->attempt_text);
	c->attempt_text = NULL;
	if (!rc) {
		c->attempt_text = es_buf_detach(&text, &c->attempt_text_len);
		c->attempt_text_mono = es_time_mono();
	}
	es_buf_free(&text);
	es_buf_free(&ad);
	es_buf_free(&parent);
	return rc;
}

/* Step 7: the attempt folder and its attempt.json; the lock is released when either cannot be
 * written. */
static int start_attempt(struct es_claimer *c, size_t i, cJSON *l)
{
	int rc = es_claim_make_attempt(c, i, l);
	if (!rc)
		es_crash_point("claim-after-attempt-json");
	if (rc)
		es_claim_release(c, i, c->token);
	return rc;
}

/* es_claim_try on the shard's lock at lock_path. */
static int claim_at(struct es_claimer *c, size_t i, const char *lock_path)
{
	const struct es_manifest *m = c->m;
	const char *id = m->shards[i].id;
	int rc;
	/* Steps 1-3. The lock decides, not the absence of a record: a finished shard keeps its
	 * lock as a terminal fence, and an NFS client may believe a fresh record absent. */
	if ((rc = probe_lock(c, i, lock_path)) <= 0)
		return rc < 0 ? rc : ES_CLAIM_NONE;
	int failures, folders;
	if ((rc = es_claim_count_failures(m->job_dir, id, NULL, &folders)))
		return rc;
	es_proc_test_hook("ESHARD_TEST_HOOK_BEFORE_CLAIM_CREATE");
	cJSON *l = NULL;
	if ((rc = create_lock(c, i, lock_path, folders, &l)) != 0) {
		if (rc == 1)
			learn_winner(c, i, lock_path);
		return rc == 1 ? ES_CLAIM_NONE : rc;
	}
	es_crash_point("claim-after-lock");
	if ((rc = es_claim_fence_if_recorded(c, i, lock_path)) != 0) {
		cJSON_Delete(l);
		return rc < 0 ? rc : ES_CLAIM_NONE;
	}
	/* Step 4, done while holding the lock (the reference did it before, without the lock, so
	 * a crash or race could publish a failed record for a shard another worker held), and
	 * counted only now: an attempt that ended between a count before the create and the
	 * create would be missed, and one attempt could run over the limit. */
	if ((rc = es_claim_count_failures(m->job_dir, id, &failures, &folders))) {
		es_claim_release(c, i, c->token);
		cJSON_Delete(l);
		return rc;
	}
	if (failures > c->policy.max_retries) {
		cJSON_Delete(l);
		return publish_limit(c, i, failures);
	}
	rc = start_attempt(c, i, l);
	cJSON_Delete(l);
	return rc ? rc : ES_CLAIM_OK;
}

int es_claim_trusts_running(const struct es_claimer *c, size_t i)
{
	const struct es_lease_obs *o = &c->obs[i];
	if (c->trust_running_secs <= 0 || !o->valid || !o->running || o->terminal)
		return 0;
	double now = es_time_mono();
	return o->lease > 0 && now - o->running_seen_mono < c->trust_running_secs && now - o->since_mono < o->lease;
}

int es_claim_known(const struct es_claimer *c, size_t i)
{
	const struct es_lease_obs *o = &c->obs[i];
	return o->valid || o->terminal || o->listed_done;
}

int es_claim_try(struct es_claimer *c, size_t i)
{
	c->took_over = 0;
	c->took_over_attempt = 0;
	if (c->obs[i].terminal || c->obs[i].listed_done || es_claim_trusts_running(c, i))
		return ES_CLAIM_NONE;
	struct es_buf lock_path = ES_BUF_INIT;
	int rc = es_jobpath_lock(&lock_path, c->m->job_dir, c->m->shards[i].id);
	/* A claim writes in state/locks, attempts/<id> and the new attempt folder: each walked
	 * once (fs.h es_fs_walk_cache_begin). */
	es_fs_walk_cache_begin();
	if (!rc)
		rc = claim_at(c, i, lock_path.data);
	es_fs_walk_cache_end();
	es_buf_free(&lock_path);
	return rc;
}

static int heartbeat_at(struct es_claimer *c, const char *lock_path)
{
	int fd;
	cJSON *doc = NULL;
	int rc = es_claim_lock_owned(lock_path, c->token, 1, &fd, &doc);
	if (rc == 2)
		return 0; /* an observer holds it for a moment: refresh next time */
	if (rc)
		return rc;
	c->heartbeat++;
	es_json_set_int(doc, "heartbeat", c->heartbeat);
	rc = es_claim_rewrite_lock(fd, lock_path, doc, "heartbeat-mid-rewrite");
	cJSON_Delete(doc);
	es_claim_unlock_close(fd);
	return rc;
}

int es_claim_heartbeat(struct es_claimer *c, size_t i)
{
	struct es_buf lock_path = ES_BUF_INIT;
	int rc = es_jobpath_lock(&lock_path, c->m->job_dir, c->m->shards[i].id);
	if (!rc)
		rc = heartbeat_at(c, lock_path.data);
	es_buf_free(&lock_path);
	return rc;
}

/* Whether the lock held open as fd is still the one at lock_path, as a listing of its folder
 * tells (es_fs_listed_ino): 1 yes, 0 no, negative on error. */
static int still_listed(int fd, const char *lock_path)
{
	struct stat st;
	struct es_buf dir = ES_BUF_INIT;
	const char *slash = strrchr(lock_path, '/');
	ino_t ino;
	int rc = !slash ? es_error(ES_EINVAL, "lock path '%s' has no folder", lock_path)
			: es_buf_add(&dir, lock_path, (size_t)(slash - lock_path));
	if (!rc && fstat(fd, &st) != 0)
		rc = es_error_errno(ES_EIO, "cannot stat lock '%s'", lock_path);
	if (!rc)
		rc = es_fs_listed_ino(dir.data, slash + 1, &ino);
	es_buf_free(&dir);
	return rc < 0 ? rc : rc == 0 && ino == st.st_ino;
}

/* The key of a lock in state/lock_ends: its token, or for a lock without a well-formed one (torn,
 * or written by hand) its inode number; a reused inode number only costs a listing below. */
static void end_key(int fd, const char *token, char key[40])
{
	struct stat st;
	if (strlen(token) == 32 && strspn(token, "0123456789abcdef") == 32)
		snprintf(key, 40, "%s", token);
	else
		snprintf(key, 40, "i%llu", fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0ULL);
}

int es_claim_end_lock(const struct es_manifest *m, const char *id, int fd, const char *lock_path, const char *token,
		      const char *action)
{
	char key[40], now[40];
	struct es_buf dir = ES_BUF_INIT, marker = ES_BUF_INIT, line = ES_BUF_INIT;
	cJSON *doc = cJSON_CreateObject();
	end_key(fd, token, key);
	es_time_now_iso(now);
	es_json_set_str(doc, "action", action);
	es_json_set_str(doc, "at", now);
	es_json_set_str(doc, "hostname", es_hostname());
	es_json_set_int(doc, "pid", (int64_t)getpid());
	int rc = es_jobpath_join(&dir, m->job_dir, ES_JOB_LOCK_ENDS);
	if (!rc)
		rc = es_jobpath_lock_end(&marker, m->job_dir, id, key);
	if (!rc)
		rc = es_fs_mkdir_nofollow(dir.data, 0755);
	if (!rc)
		rc = es_json_dump(doc, 0, &line);
	if (!rc)
		rc = es_fs_create_exclusive(marker.data, line.data, line.len);
	/* Made before: its maker held this flock, and ends the lock before it gives it back. */
	if (rc == 1) {
		int listed = still_listed(fd, lock_path);
		rc = listed < 0 ? listed : !listed;
	}
	cJSON_Delete(doc);
	es_buf_free(&dir);
	es_buf_free(&marker);
	es_buf_free(&line);
	return rc;
}

static int release_at(const struct es_manifest *m, const char *id, const char *lock_path, const char *token)
{
	int fd;
	int rc = es_claim_lock_owned(lock_path, token, 0, &fd, NULL);
	if (rc)
		return rc;
	es_proc_test_hook("ESHARD_TEST_HOOK_BEFORE_RELEASE");
	if ((rc = es_claim_end_lock(m, id, fd, lock_path, token, "release")) != 0) {
		es_claim_unlock_close(fd);
		return rc;
	}
	es_crash_point("release-before-unlink");
	if (unlink(lock_path) != 0)
		rc = es_error_errno(ES_EIO, "cannot remove lock '%s'", lock_path);
	else
		rc = es_fs_fsync_parent(lock_path);
	es_claim_unlock_close(fd);
	return rc;
}

int es_claim_release(struct es_claimer *c, size_t i, const char *token)
{
	struct es_buf lock_path = ES_BUF_INIT;
	int rc = es_jobpath_lock(&lock_path, c->m->job_dir, c->m->shards[i].id);
	if (!rc)
		rc = release_at(c->m, c->m->shards[i].id, lock_path.data, token);
	es_buf_free(&lock_path);
	if (!rc)
		es_claim_hint(c->m, c->m->shards[i].id, "released"); /* idle workers try it now */
	return rc;
}

/* ---------------- the hint (docs/job-folder.md#the-hint) ---------------- */

int es_claim_hint(const struct es_manifest *m, const char *shard_id, const char *event)
{
	struct es_buf path = ES_BUF_INIT, text = ES_BUF_INIT;
	char now[40];
	es_time_now_iso(now);
	cJSON *h = cJSON_CreateObject();
	es_json_set_str(h, "at", now);
	es_json_set_str(h, "event", event);
	es_json_set_str(h, "hostname", es_hostname());
	es_json_set_int(h, "pid", (int64_t)getpid());
	if (shard_id)
		es_json_set_str(h, "shard_id", shard_id);
	else
		es_json_set_null(h, "shard_id");
	/* Quiet: a lost hint delays idle workers by a quarter lease at most (claim.h). */
	es_log_quiet_begin();
	int rc = es_jobpath_join(&path, m->job_dir, ES_JOB_HINT);
	if (!rc)
		rc = es_json_dump(h, 0, &text);
	if (!rc)
		rc = es_fs_write_atomic(path.data, text.data, text.len);
	es_log_quiet_end();
	cJSON_Delete(h);
	es_buf_free(&path);
	es_buf_free(&text);
	return rc;
}

/* What fstat() says of fd into *st: 0, or 1 when it cannot be asked or the file has no link
 * left (replaced). */
static int hint_stat(int fd, struct es_claim_hint_stat *st)
{
	struct stat sb;
	if (fd < 0 || fstat(fd, &sb) != 0 || sb.st_nlink == 0)
		return 1;
	st->dev = sb.st_dev;
	st->ino = sb.st_ino;
	st->nlink = sb.st_nlink;
	st->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
	st->ctime_ns = (int64_t)sb.st_ctim.tv_sec * 1000000000LL + sb.st_ctim.tv_nsec;
	st->size = sb.st_size;
	return 0;
}

static int hint_same(const struct es_claim_hint_stat *a, const struct es_claim_hint_stat *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->nlink == b->nlink && a->mtime_ns == b->mtime_ns &&
	       a->ctime_ns == b->ctime_ns && a->size == b->size;
}

/* The folder, then the hint, looked at anew: the folder first, so that a replace between the
 * two looks changes the folder again after what was kept of it. The folder stays open (state/
 * is never replaced; it is opened again only when its fstat() fails). The hint is kept only when
 * it can be: on GlusterFS an open of its name can give the file it replaced for a while (the
 * client's cache of the name), whose fstat() then fails with ESTALE; the folder alone tells
 * the next change, and the look is not repeated at every poll. */
static void hint_look(const struct es_manifest *m, struct es_claim_hint_seen *seen)
{
	struct es_buf path = ES_BUF_INIT;
	if (seen->fd >= 0)
		close(seen->fd);
	seen->fd = -1;
	seen->known = 0;
	es_log_quiet_begin();
	if (seen->dir_fd < 0 && !es_jobpath_join(&path, m->job_dir, ES_JOB_STATE))
		/* Opened as it is, like the hint below (O_NOFOLLOW on the last name): what a watcher
		 * sees of it only brings its next read of the locks forward. */
		seen->dir_fd = open(path.data, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (seen->dir_fd >= 0 && !hint_stat(seen->dir_fd, &seen->dir) &&
	    !es_jobpath_join(&path, m->job_dir, ES_JOB_HINT)) {
		seen->known = 1;
		/* No hint yet (nobody released or finished a shard since the job was prepared), or
		 * not one that can be kept: the folder tells when one comes. */
		if (es_fs_open_read(path.data, O_RDONLY | O_NOFOLLOW, &seen->fd) != 0 || hint_stat(seen->fd, &seen->file)) {
			if (seen->fd >= 0)
				close(seen->fd);
			seen->fd = -1;
		}
	}
	es_log_quiet_end();
	es_buf_free(&path);
	if (!seen->known)
		es_claim_hint_forget(seen);
}

int es_claim_hint_changed(const struct es_manifest *m, struct es_claim_hint_seen *seen)
{
	if (seen->known) {
		struct es_claim_hint_stat dir, file;
		int dir_ok = !hint_stat(seen->dir_fd, &dir);
		int same = dir_ok && hint_same(&dir, &seen->dir);
		if (same && seen->fd >= 0)
			same = !hint_stat(seen->fd, &file) && hint_same(&file, &seen->file);
		if (same)
			return 0;
		if (!dir_ok)
			es_claim_hint_forget(seen); /* the folder is opened again */
	}
	hint_look(m, seen);
	return 1;
}

void es_claim_hint_forget(struct es_claim_hint_seen *seen)
{
	if (seen->fd >= 0)
		close(seen->fd);
	if (seen->dir_fd >= 0)
		close(seen->dir_fd);
	seen->fd = seen->dir_fd = -1;
	seen->known = 0;
}

double es_claim_next_stale(const struct es_claimer *c)
{
	double next = INFINITY;
	for (size_t i = 0; i < c->m->n_shards; i++) {
		const struct es_lease_obs *o = &c->obs[i];
		if (o->valid && !o->terminal && !o->listed_done && o->lease > 0 && o->since_mono + o->lease < next)
			next = o->since_mono + o->lease;
	}
	return next;
}
