#include "eshard/fs.h"
#include "eshard/clock.h"
#include "eshard/crash.h"
#include "eshard/log.h"
#include "eshard/proc.h"

#include <errno.h>
#include <sys/statfs.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/time.h>
#include <unistd.h>
#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#ifdef SYS_openat2
#include <linux/openat2.h>
#endif

int es_fs_token(char out[33])
{
	unsigned char raw[16];
	size_t got = 0;
	while (got < sizeof(raw)) {
		ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return es_error_errno(ES_EIO, "cannot read random bytes for a token");
		}
		got += (size_t)n;
	}
	/* uuid4 version and variant bits, so the token is a valid uuid4 hex like the reference's. */
	raw[6] = (unsigned char)((raw[6] & 0x0f) | 0x40);
	raw[8] = (unsigned char)((raw[8] & 0x3f) | 0x80);
	static const char hex[] = "0123456789abcdef";
	for (int i = 0; i < 16; i++) {
		out[2 * i] = hex[raw[i] >> 4];
		out[2 * i + 1] = hex[raw[i] & 15];
	}
	out[32] = '\0';
	return 0;
}

/* The maker of a temporary or a stage folder is named in its token (see fs.h): this host's
 * identity is its host name, its boot id and its pid namespace, so two containers that share a
 * host name (or a reused name after a reboot) never judge each other's processes. */
static uint32_t host_id(void)
{
	static uint32_t cached;
	if (cached)
		return cached;
	char buf[512] = "";
	gethostname(buf, 255);
	size_t n = strlen(buf);
	buf[n++] = '\n';
	int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t r = read(fd, buf + n, 64);
		n += r > 0 ? (size_t)r : 0;
		close(fd);
	}
	struct stat st;
	if (stat("/proc/self/ns/pid", &st) == 0)
		n += (size_t)snprintf(buf + n, sizeof(buf) - n, "%llu", (unsigned long long)st.st_ino);
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < n && i < sizeof(buf); i++)
		h = (h ^ (unsigned char)buf[i]) * 16777619u;
	cached = h ? h : 1;
	return cached;
}

/* The low 32 bits of a process's start time (clock ticks since boot, /proc/<pid>/stat field
 * 22): with the pid it names one process for the life of the boot, so a reused pid is not
 * taken for the maker. 0 when the process does not exist, is a zombie (dead, not yet reaped)
 * or /proc cannot say; *known tells the last two apart from the first (1: /proc answered). */
static uint32_t proc_start(pid_t pid, int *known)
{
	struct es_proc_stat st;
	*known = es_proc_stat_read(pid, &st);
	if (!*known || st.state == 'Z' || st.state == 'X')
		return 0;
	return (uint32_t)st.starttime;
}

void es_fs_temp_maker(char out[25])
{
	int known;
	snprintf(out, 25, "%08x%08x%08x", (unsigned)getpid(), (unsigned)host_id(), (unsigned)proc_start(getpid(), &known));
}

int es_fs_temp_token(char out[33])
{
	char rnd[33], maker[25];
	int rc = es_fs_token(rnd);
	if (rc)
		return rc;
	es_fs_temp_maker(maker);
	snprintf(out, 33, "%s%.8s", maker, rnd);
	return 0;
}

/* The 32-hex token of ".<x>.<token>.tmp" or "<x>.preparing.<token>", or NULL. */
static const char *token_of(const char *name)
{
	size_t n = strlen(name);
	const char *end = n > 4 && !strcmp(name + n - 4, ".tmp") ? name + n - 4 : name + n;
	if (end - name < 34 || end[-33] != '.')
		return NULL;
	const char *t = end - 32;
	for (int i = 0; i < 32; i++)
		if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f')))
			return NULL;
	return t;
}

int es_fs_temp_owner(const char *name)
{
	const char *t = token_of(name);
	unsigned pid = 0, host = 0, start = 0;
	if (!t || sscanf(t, "%8x%8x%8x", &pid, &host, &start) != 3 || host != host_id() || pid == 0 || pid > INT_MAX)
		return ES_TEMP_UNKNOWN;
	/* A process that exists with the same start time is the maker (or this process itself);
	 * a zombie is dead. */
	int known;
	uint32_t now = proc_start((pid_t)pid, &known);
	if (known)
		return now == start && now != 0 ? ES_TEMP_LIVE : ES_TEMP_GONE;
	if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
		return ES_TEMP_LIVE; /* it exists, but /proc cannot tell its start time: assume the maker */
	return ES_TEMP_GONE;
}

/* Whether the token of temporary name names maker (24 hex, es_fs_temp_maker). */
static int made_by(const char *name, const char *maker)
{
	const char *t = token_of(name);
	return maker && strlen(maker) == 24 && t && !strncmp(t, maker, 24);
}

/* idle_secs < 0: remove what es_fs_temp_owner says is gone; else remove what has not changed
 * for idle_secs (its maker is known to be gone); or_gone: with idle_secs >= 0, also remove what
 * es_fs_temp_owner says is gone, whatever its age; dead_maker (not NULL): with idle_secs >= 0,
 * also remove what that maker made, whatever its age and host. same_as (not NULL): remove only
 * what is that very file (device and inode), whatever its age and maker. */
static int sweep(const char *dir, const char *prefix, int report_kept, double idle_secs, int or_gone,
		 const char *dead_maker, const struct stat *same_as)
{
	DIR *d = opendir(dir);
	if (!d)
		return errno == ENOENT ? 0 : es_error_errno(ES_EIO, "cannot read folder '%s'", dir);
	int removed = 0;
	struct dirent *e;
	size_t lp = prefix ? strlen(prefix) : 0;
	while ((e = readdir(d)) != NULL) {
		const char *n = e->d_name;
		size_t len = strlen(n);
		if (n[0] != '.' || len < 4 || strcmp(n + len - 4, ".tmp") || (prefix && strncmp(n + 1, prefix, lp)))
			continue;
		struct stat st;
		if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
			continue;
		if (same_as) {
			if (st.st_dev == same_as->st_dev && st.st_ino == same_as->st_ino && unlinkat(dirfd(d), n, 0) == 0) {
				removed++;
				es_warning("removed %s/%s, a second name of a published file left by a writer that died "
					   "between its link and its unlink", dir, n);
			}
			continue;
		}
		if (idle_secs >= 0) {
			struct timespec now;
			clock_gettime(CLOCK_REALTIME, &now);
			double age = (double)(now.tv_sec - st.st_mtim.tv_sec) + (now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
			if ((age >= idle_secs || made_by(n, dead_maker) || (or_gone && es_fs_temp_owner(n) == ES_TEMP_GONE)) &&
			    unlinkat(dirfd(d), n, 0) == 0) {
				removed++;
				es_warning("removed %s/%s, a temporary file left by a worker whose shard was taken over", dir, n);
			}
			continue;
		}
		int owner = es_fs_temp_owner(n);
		if (owner == ES_TEMP_UNKNOWN && report_kept)
			es_warning("kept %s/%s: a temporary made on another host (or before a reboot), whose maker cannot be "
				   "checked from here; remove it by hand once nothing writes it", dir, n);
		if (owner != ES_TEMP_GONE)
			continue;
		if (unlinkat(dirfd(d), n, 0) == 0) {
			removed++;
			es_warning("removed %s/%s, a temporary file left by a process that is gone", dir, n);
		}
	}
	closedir(d);
	return removed;
}

int es_fs_sweep_temps(const char *dir, const char *prefix, int report_kept)
{
	return sweep(dir, prefix, report_kept, -1, 0, NULL, NULL);
}

int es_fs_sweep_dead_temps(const char *dir, double idle_secs)
{
	return sweep(dir, NULL, 0, idle_secs < 0 ? 0 : idle_secs, 0, NULL, NULL);
}

int es_fs_sweep_writer_temps(const char *dir, const char *prefix, double idle_secs, const char *dead_maker)
{
	return sweep(dir, prefix, 0, idle_secs < 0 ? 0 : idle_secs, 1, dead_maker, NULL);
}

int es_fs_sweep_links_of(const char *dir, const char *prefix, const char *path)
{
	struct stat st;
	if (stat(path, &st) != 0)
		return errno == ENOENT ? 0 : es_error_errno(ES_EIO, "cannot stat '%s'", path);
	return sweep(dir, prefix, 0, -1, 0, NULL, &st);
}

int es_path_join(struct es_buf *out, const char *a, const char *b)
{
	es_buf_reset(out);
	size_t la = strlen(a);
	int rc = es_buf_add(out, a, la);
	if (!rc && (la == 0 || a[la - 1] != '/'))
		rc = es_buf_addc(out, '/');
	if (!rc)
		rc = es_buf_adds(out, b);
	return rc;
}

int es_fs_write_all(int fd, const void *data, size_t len, const char *what)
{
	const char *p = data;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return es_error_errno(ES_EIO, "cannot write '%s'", what);
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Folders on the way are opened with O_PATH where there is one: a name lookup only (answered
 * from the client's cache like any path walk), no open request to the file system. */
#ifdef O_PATH
#define ES_WALK_FLAGS (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#else
#define ES_WALK_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
#endif

/* The job folder boundary (fs.h es_fs_set_boundary): the resolved job folder, "" when none. */
static pthread_mutex_t boundary_mu = PTHREAD_MUTEX_INITIALIZER;
static struct es_buf boundary = ES_BUF_INIT;

void es_fs_set_boundary(const char *root)
{
	pthread_mutex_lock(&boundary_mu);
	size_t n = root ? strlen(root) : 0;
	while (n > 1 && root[n - 1] == '/')
		n--;
	es_buf_reset(&boundary);
	if (n > 1 && es_buf_add(&boundary, root, n) != 0)
		es_buf_reset(&boundary); /* "/" or a path we cannot hold: no boundary */
	pthread_mutex_unlock(&boundary_mu);
}

/* The walk cache (fs.h es_fs_walk_cache_begin): folders below the boundary that this thread
 * walked, at most three levels down (state/done, attempts/<shard>, an attempt folder), kept
 * open while a reader of many files or a worker's shard is between begin and end; a walk
 * starts from the deepest one that holds its target. A folder handed out by beneath() is busy
 * until close_dir(); when the cache is full, the oldest folder that is not busy makes room.
 * A folder fsynced once keeps the descriptor that fsync opened (sync_fd) for the next one: on
 * a FUSE file system each open of a folder is an OPENDIR and each close a RELEASEDIR. */
#define ES_WALK_CACHE 16
#define ES_WALK_CACHE_DEPTH 3
static __thread struct walk_cached {
	char *dir; /* the folder's path, as the walk spelled it */
	int fd, busy;
	int sync_fd; /* the folder opened for fsync, once fsync_at needed it; -1 until then */
	unsigned long used;
} walk_cache[ES_WALK_CACHE];
static __thread int walk_cache_on, walk_cache_n;
static __thread unsigned long walk_cache_clock;

void es_fs_walk_cache_begin(void)
{
	walk_cache_on++;
}

static void walk_cached_free(struct walk_cached *c)
{
	close(c->fd);
	if (c->sync_fd >= 0)
		close(c->sync_fd);
	free(c->dir);
}

void es_fs_walk_cache_end(void)
{
	if (walk_cache_on == 0 || --walk_cache_on)
		return;
	for (int i = 0; i < walk_cache_n; i++)
		walk_cached_free(&walk_cache[i]);
	walk_cache_n = 0;
}

static struct walk_cached *walk_cached_of(int fd)
{
	for (int i = 0; walk_cache_on && i < walk_cache_n; i++)
		if (walk_cache[i].fd == fd)
			return &walk_cache[i];
	return NULL;
}

/* The deepest cached folder that is path's first len bytes or holds them (-1: none); *at gets
 * the length of its path. */
static int walk_cache_find(const char *path, size_t len, size_t *at)
{
	int best = -1;
	size_t best_len = 0;
	for (int i = 0; walk_cache_on && i < walk_cache_n; i++) {
		size_t n = strlen(walk_cache[i].dir);
		if (n <= len && n > best_len && !strncmp(walk_cache[i].dir, path, n) && (n == len || path[n] == '/')) {
			best = i;
			best_len = n;
		}
	}
	*at = best_len;
	if (best < 0)
		return -1;
	walk_cache[best].used = ++walk_cache_clock;
	return walk_cache[best].fd;
}

/* Keep fd (the folder that is path's first len bytes, depth levels below the boundary) for the
 * walks that follow: 1 when kept (the cache owns it now), 0 when not. from: the folder the walk
 * came from, which must stay. */
static int walk_cache_keep(const char *path, size_t len, int depth, int fd, int from)
{
	if (!walk_cache_on || depth < 0 || depth > ES_WALK_CACHE_DEPTH)
		return 0;
	int slot = walk_cache_n;
	if (slot == ES_WALK_CACHE) {
		slot = -1;
		for (int i = 0; i < walk_cache_n; i++)
			if (!walk_cache[i].busy && walk_cache[i].fd != from &&
			    (slot < 0 || walk_cache[i].used < walk_cache[slot].used))
				slot = i;
		if (slot < 0)
			return 0;
	}
	char *dir = malloc(len + 1);
	if (!dir)
		return 0;
	memcpy(dir, path, len);
	dir[len] = '\0';
	if (slot < walk_cache_n)
		walk_cached_free(&walk_cache[slot]);
	else
		walk_cache_n++;
	walk_cache[slot] = (struct walk_cached){ dir, fd, 0, -1, ++walk_cache_clock };
	return 1;
}

static int walk_beneath(const char *path, const char *root, int *dfd, const char **name);

/* Whether path is below the boundary; *rl (may be NULL) gets the boundary's length, read under
 * the same lock. */
static int below_boundary(const char *path, size_t *rl)
{
	pthread_mutex_lock(&boundary_mu);
	size_t n = boundary.len;
	int below = n && !strncmp(path, boundary.data, n) && path[n] == '/';
	pthread_mutex_unlock(&boundary_mu);
	if (rl)
		*rl = n;
	return below;
}

int es_fs_below_boundary(const char *path)
{
	return below_boundary(path, NULL);
}

/* The folder that holds path, for an operation on its last component: outside the boundary
 * *dfd is AT_FDCWD and *name is path (nothing changes); below it, *dfd is that folder opened
 * from the boundary one component at a time with O_NOFOLLOW (close it with close_dir), and
 * *name its last component, so the operation itself cannot be sent out of the job folder by a
 * symbolic link planted in between, not even one planted after the manifest was checked.
 * A link (or "..") is ES_EINVAL naming it; a missing folder is ES_ENOENT ("cannot open"). */
static int beneath(const char *path, int *dfd, const char **name)
{
	size_t rl;
	int below = below_boundary(path, &rl);
	*dfd = AT_FDCWD;
	*name = path;
	if (!below)
		return 0;
	/* The boundary is path's own first rl bytes: a copy of them, not of the shared one. */
	struct es_buf root = ES_BUF_INIT;
	int rc = es_buf_add(&root, path, rl);
	if (!rc)
		rc = walk_beneath(path, root.data, dfd, name);
	es_buf_free(&root);
	return rc;
}

/* beneath() for a path below the boundary root. Each folder on the way is opened from the one
 * before it with O_NOFOLLOW, from the root or from the deepest folder of the walk cache that
 * holds the target. */
static int walk_beneath(const char *path, const char *root, int *dfd, const char **name)
{
	size_t rl = strlen(root), at = 0;
	const char *last = strrchr(path, '/');
	*name = last + 1;
	int fd = walk_cache_find(path, (size_t)(last - path), &at), cached = fd >= 0, depth = 0;
	if (cached) {
		for (const char *c = path + rl; c < path + at; c++)
			depth += *c == '/';
	} else {
		at = rl;
		fd = open(root, ES_WALK_FLAGS);
		if (fd < 0)
			return es_error_errno(errno == ENOENT ? ES_ENOENT : ES_EIO, "cannot open folder '%s'", root);
		cached = walk_cache_keep(path, rl, 0, fd, -1); /* the job folder itself, for every walk after */
	}
	for (const char *c = path + at + 1; c < last;) {
		const char *e = strchr(c, '/');
		size_t n = (size_t)(e - c);
		char comp[NAME_MAX + 1];
		if (n > NAME_MAX) {
			if (!cached)
				close(fd);
			return es_error(ES_EINVAL, "name too long in '%s'", path);
		}
		memcpy(comp, c, n);
		comp[n] = '\0';
		c = e + 1;
		if (n == 0 || !strcmp(comp, "."))
			continue;
		int len = (int)(e - path);
		if (!strcmp(comp, "..")) {
			if (!cached)
				close(fd);
			return es_error(ES_EINVAL, "%.*s leaves the job folder %s; eshard-mpi does not go out of a job folder",
					len, path, root);
		}
		int next = openat(fd, comp, ES_WALK_FLAGS);
		int err = errno;
		struct stat st;
		if (next < 0 && fstatat(fd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
			if (!cached)
				close(fd);
			return es_error(ES_EINVAL, "%.*s is a symbolic link; eshard-mpi does not follow links out of a job folder",
					len, path);
		}
		if (next < 0) {
			if (!cached)
				close(fd);
			errno = err;
			return es_error_errno(err == ENOENT || err == ENOTDIR ? ES_ENOENT : ES_EIO, "cannot open '%.*s'", len,
					      path);
		}
		int kept = walk_cache_keep(path, (size_t)len, ++depth, next, cached ? fd : -1);
		if (!cached)
			close(fd);
		fd = next;
		cached = kept;
	}
	struct walk_cached *c = cached ? walk_cached_of(fd) : NULL;
	if (c)
		c->busy++;
	*dfd = fd;
	return 0;
}

static void close_dir(int dfd)
{
	struct walk_cached *c = dfd == AT_FDCWD ? NULL : walk_cached_of(dfd);
	if (c)
		c->busy--;
	else if (dfd != AT_FDCWD)
		close(dfd);
}

/*
 * A reader's shortcut below the boundary (issue 29: status reads an attempt.json and a result
 * per shard): the whole rest of path opened in one openat2 call from the deepest folder of the
 * walk cache that holds it, refusing every symbolic link and every way out of that folder
 * (RESOLVE_NO_SYMLINKS, RESOLVE_BENEATH) as walk_beneath's component-by-component walk does.
 * 0 with *fd; -1 when it cannot be taken (no cached folder, a ".." or "." component, a kernel
 * without openat2, or any failure): the caller then takes the walk, which says what is wrong.
 * Nothing is reported here.
 */
static int open_beneath_fast(const char *path, int flags, int *fd)
{
#ifdef SYS_openat2
	static int no_openat2;
	if (__atomic_load_n(&no_openat2, __ATOMIC_RELAXED) || !walk_cache_on || !below_boundary(path, NULL))
		return -1;
	const char *last = strrchr(path, '/');
	size_t at;
	int from = walk_cache_find(path, (size_t)(last - path), &at);
	if (from < 0)
		return -1;
	const char *rel = path + at + 1;
	for (const char *c = rel; *c;) {
		const char *e = strchrnul(c, '/');
		size_t n = (size_t)(e - c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return -1;
		c = *e ? e + 1 : e;
	}
	struct open_how how;
	memset(&how, 0, sizeof(how));
	how.flags = (uint64_t)(flags | O_CLOEXEC);
	how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
	long r = syscall(SYS_openat2, from, rel, &how, sizeof(how));
	if (r >= 0) {
		*fd = (int)r;
		return 0;
	}
	if (errno == ENOSYS || errno == EPERM) /* an old kernel, or a filter that refuses the call */
		__atomic_store_n(&no_openat2, 1, __ATOMIC_RELAXED);
#else
	(void)path;
	(void)flags;
	(void)fd;
#endif
	return -1;
}

int es_fs_lstat_beneath(const char *path, struct stat *st)
{
	int dfd;
	const char *name;
	es_log_quiet_begin();
	int rc = beneath(path, &dfd, &name);
	es_log_quiet_end();
	if (rc)
		return -1;
	/* AT_FDCWD: path is not below the boundary (beneath's own check), and name is the whole
	 * path, which would be walked with links. */
	int ok = dfd != AT_FDCWD && strcmp(name, ".") && strcmp(name, "..") &&
		 fstatat(dfd, name, st, AT_SYMLINK_NOFOLLOW) == 0;
	close_dir(dfd);
	return ok ? 0 : -1;
}

/* The name of tmp (a sibling of the target that beneath() gave dfd for) as seen from dfd. */
static const char *from_dir(int dfd, const char *tmp)
{
	const char *slash = strrchr(tmp, '/');
	return dfd == AT_FDCWD || !slash ? tmp : slash + 1;
}

/* fsync the folder dfd (AT_FDCWD: the folder that holds path). */
static int fsync_at(int dfd, const char *path)
{
	if (dfd == AT_FDCWD)
		return es_fs_fsync_parent(path);
	struct walk_cached *c = walk_cached_of(dfd);
	int fd = c && c->sync_fd >= 0 ? c->sync_fd : openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC); /* dfd may be an O_PATH one */
	if (fd < 0)
		return es_error_errno(ES_EIO, "cannot open the folder of '%s' to fsync it", path);
	int rc = 0;
	if (fsync(fd) != 0 && errno != EINVAL)
		rc = es_error_errno(ES_EIO, "cannot fsync the folder of '%s'", path);
	if (c)
		c->sync_fd = fd;
	else
		close(fd);
	return rc;
}

static int split_dir(const char *path, struct es_buf *dir, const char **name)
{
	const char *slash = strrchr(path, '/');
	es_buf_reset(dir);
	if (!slash) {
		*name = path;
		return es_buf_adds(dir, ".");
	}
	*name = slash + 1;
	if (slash == path)
		return es_buf_adds(dir, "/");
	return es_buf_add(dir, path, (size_t)(slash - path));
}

int es_fs_fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return es_error_errno(ES_EIO, "cannot open folder '%s' to fsync it", dir);
	int rc = 0;
	if (fsync(fd) != 0 && errno != EINVAL)
		rc = es_error_errno(ES_EIO, "cannot fsync folder '%s'", dir);
	close(fd);
	return rc;
}

int es_fs_fsync_parent(const char *path)
{
	struct es_buf dir = ES_BUF_INIT;
	const char *name;
	int rc = split_dir(path, &dir, &name);
	if (!rc)
		rc = es_fs_fsync_dir(dir.data);
	es_buf_free(&dir);
	return rc;
}

int es_fs_open_new(const char *path, mode_t mode, int rw, int *fd)
{
	int dfd;
	const char *name;
	*fd = -1;
	int rc = beneath(path, &dfd, &name);
	if (rc)
		return rc;
	*fd = openat(dfd, name, (rw ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	int err = errno;
	close_dir(dfd);
	errno = err;
	if (*fd < 0)
		return es_error_errno(errno == EEXIST ? ES_EEXIST : ES_EIO, "cannot create '%s'", path);
	return 0;
}

/* The name of a fresh temporary beside target: ".<name>.<temp token>.tmp" in its folder. */
static int temp_name(const char *target, struct es_buf *tmp)
{
	struct es_buf dir = ES_BUF_INIT;
	const char *name;
	char tok[33];
	int rc = split_dir(target, &dir, &name);
	if (!rc)
		rc = es_fs_temp_token(tok);
	if (!rc) {
		es_buf_reset(tmp);
		rc = es_buf_printf(tmp, "%s%s.%s.%s.tmp", dir.data,
				   strcmp(dir.data, "/") ? "/" : "", name, tok);
	}
	es_buf_free(&dir);
	return rc;
}

int es_fs_open_temp(const char *target, struct es_buf *tmp, int *fd)
{
	int rc = temp_name(target, tmp);
	return rc ? rc : es_fs_open_new(tmp->data, 0644, 0, fd);
}

/* Write data into a fresh temporary beside path, made in dfd, the folder of path that beneath()
 * opened (so the temporary and the rename or link that publishes it act on one folder, walked
 * once: every step of the walk is a round trip on NFS); its name is left in tmp. */
static int write_temp_at(int dfd, const char *path, const void *data, size_t len, struct es_buf *tmp)
{
	int rc = temp_name(path, tmp);
	if (rc)
		return rc;
	int fd = openat(dfd, from_dir(dfd, tmp->data), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return es_error_errno(errno == EEXIST ? ES_EEXIST : ES_EIO, "cannot create '%s'", tmp->data);
	rc = es_fs_write_all(fd, data, len, tmp->data);
	if (!rc && fsync(fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync '%s'", tmp->data);
	if (close(fd) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot close '%s'", tmp->data);
	if (rc)
		unlinkat(dfd, from_dir(dfd, tmp->data), 0);
	return rc;
}

int es_fs_write_atomic(const char *path, const void *data, size_t len)
{
	struct es_buf tmp = ES_BUF_INIT;
	int dfd = AT_FDCWD;
	const char *name;
	int rc = beneath(path, &dfd, &name);
	if (!rc)
		rc = write_temp_at(dfd, path, data, len, &tmp);
	if (!rc) {
		if (renameat(dfd, from_dir(dfd, tmp.data), dfd, name) != 0) {
			rc = es_error_errno(ES_EIO, "cannot rename '%s' to '%s'", tmp.data, path);
			unlinkat(dfd, from_dir(dfd, tmp.data), 0);
		} else {
			rc = fsync_at(dfd, path);
		}
	}
	close_dir(dfd);
	es_buf_free(&tmp);
	return rc;
}

int es_fs_publish_exclusive(const char *path, const void *data, size_t len)
{
	struct es_buf tmp = ES_BUF_INIT;
	int dfd = AT_FDCWD;
	const char *name;
	int rc = beneath(path, &dfd, &name);
	if (!rc)
		rc = write_temp_at(dfd, path, data, len, &tmp);
	if (!rc) {
		es_crash_point("publish-after-temp");
		if (linkat(dfd, from_dir(dfd, tmp.data), dfd, name, 0) != 0) {
			if (errno == EEXIST)
				rc = 1;
			else
				rc = es_error_errno(ES_EIO, "cannot publish '%s'", path);
		}
		es_crash_point("publish-after-link");
		unlinkat(dfd, from_dir(dfd, tmp.data), 0);
		if (rc == 0)
			rc = fsync_at(dfd, path);
	}
	close_dir(dfd);
	es_buf_free(&tmp);
	return rc;
}

int es_fs_create_exclusive(const char *path, const void *data, size_t len)
{
	int dfd;
	const char *name;
	int rc = beneath(path, &dfd, &name);
	if (rc)
		return rc;
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		rc = errno == EEXIST ? 1 : es_error_errno(ES_EIO, "cannot create '%s'", path);
		close_dir(dfd);
		return rc;
	}
	rc = es_fs_write_all(fd, data, len, path);
	if (!rc && fsync(fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync '%s'", path);
	close(fd);
	if (!rc)
		rc = fsync_at(dfd, path);
	close_dir(dfd);
	return rc;
}

enum { RN_EXISTS_OK = 1, RN_MISSING_OK = 2, RN_FIXED_OK = 4 };

/* renameat() of from to to, each folder opened by beneath(): 0, 1 (with RN_EXISTS_OK: the
 * target exists, for a folder: EEXIST or ENOTEMPTY; with RN_MISSING_OK: from is missing), or
 * negative. Both folders are fsynced. */
static int rename_beneath(const char *from, const char *to, int flags)
{
	int exists_ok = flags & RN_EXISTS_OK;
	int fd1, fd2 = AT_FDCWD;
	const char *n1, *n2 = to;
	const char *sf = strrchr(from, '/'), *st = strrchr(to, '/');
	size_t lf = sf ? (size_t)(sf - from) : 0, lt = st ? (size_t)(st - to) : 0;
	int same = lf == lt && strncmp(from, to, lf) == 0;
	int rc = beneath(from, &fd1, &n1);
	/* Within one folder (a temporary renamed to its target) the folder is walked once. */
	if (!rc && same) {
		fd2 = fd1;
		n2 = fd1 == AT_FDCWD || !st ? to : st + 1;
	}
	if (!rc && (same || (rc = beneath(to, &fd2, &n2)) == 0)) {
		if (renameat(fd1, n1, fd2, n2) != 0)
			rc = (exists_ok && (errno == EEXIST || errno == ENOTEMPTY)) ||
				     ((flags & RN_MISSING_OK) && errno == ENOENT)
				     ? 1
				     : (flags & RN_FIXED_OK) && (errno == EBUSY || errno == EPERM || errno == EACCES || errno == EXDEV)
				     ? 2
				     : es_error_errno(ES_EIO, "cannot rename '%s' to '%s'", from, to);
		else
			rc = fsync_at(fd2, to);
		if (!rc && !exists_ok && !same)
			rc = fsync_at(fd1, from);
	}
	close_dir(fd1);
	if (!same)
		close_dir(fd2);
	return rc;
}

int es_fs_rename(const char *from, const char *to)
{
	return rename_beneath(from, to, 0);
}

int es_fs_publish_dir(const char *from, const char *to)
{
	return rename_beneath(from, to, RN_EXISTS_OK | RN_FIXED_OK);
}

int es_fs_move_entry(const char *from, const char *to)
{
	/* Below a boundary, a missing stage folder is already an error of beneath(): kept quiet
	 * here, as it means the same as a missing entry. */
	es_log_quiet_begin();
	int rc = rename_beneath(from, to, RN_MISSING_OK);
	es_log_quiet_end();
	if (rc == ES_ENOENT)
		return 1;
	return rc < 0 ? es_error(rc, "%s", es_last_error()) : rc;
}

int es_fs_is_mount_point(const char *path)
{
	struct statx sx;
	if (statx(AT_FDCWD, path, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &sx) != 0)
		return es_error_errno(ES_EIO, "cannot stat '%s'", path);
	if (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT)
		return (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
	/* Linux before 5.8 does not say: a folder on another device than its parent is one (a bind
	 * mount within one file system is not seen; its rename then fails with EBUSY). */
	struct es_buf parent = ES_BUF_INIT;
	const char *name;
	struct stat st;
	int rc = split_dir(path, &parent, &name);
	if (!rc && stat(parent.data, &st) != 0)
		rc = es_error_errno(ES_EIO, "cannot stat '%s'", parent.data);
	if (!rc)
		rc = st.st_dev != makedev(sx.stx_dev_major, sx.stx_dev_minor);
	es_buf_free(&parent);
	return rc;
}

/* The first operation of es_fs_probe() that did not work, and its errno. */
struct probe {
	int dfd;
	const char *lacks;
	int err;
	char name[3][80];
};

static int probe_check(struct probe *p, int ok, const char *what)
{
	if (!ok && !p->lacks) {
		p->lacks = what;
		p->err = errno;
	}
	return ok;
}

/* The steps after the first exclusive create of name[0] (open as fd), each only while the ones
 * before worked: what the claim protocol (exclusive create, flock), the publish of a done record
 * (hard link) and every atomic write (rename over a file) rely on. */
static void probe_steps(struct probe *p, int fd)
{
	errno = 0;
	int again = openat(p->dfd, p->name[0], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (again >= 0)
		close(again);
	if (!probe_check(p, again < 0 && errno == EEXIST, "exclusive create (O_EXCL)"))
		return;
	if (!probe_check(p, flock(fd, LOCK_EX | LOCK_NB) == 0, "file locks (flock)"))
		return;
	flock(fd, LOCK_UN);
	if (!probe_check(p, linkat(p->dfd, p->name[0], p->dfd, p->name[1], 0) == 0, "hard links"))
		return;
	int third = openat(p->dfd, p->name[2], O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (!probe_check(p, third >= 0, "exclusive create (O_EXCL)"))
		return;
	close(third);
	probe_check(p, renameat(p->dfd, p->name[2], p->dfd, p->name[1]) == 0, "rename over a file");
}

int es_fs_probe(const char *dir, const char *shown)
{
	struct probe p = { .dfd = -1 };
	char tok[33];
	int rc = es_fs_temp_token(tok);
	if (rc)
		return rc;
	for (int i = 0; i < 3; i++)
		snprintf(p.name[i], sizeof(p.name[i]), ".eshard-probe-%c.%s.tmp", 'a' + i, tok);
	if ((p.dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return es_error_errno(ES_EIO, "cannot open folder '%s'", dir);
	int fd = openat(p.dfd, p.name[0], O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = es_error_errno(ES_EIO, "cannot create '%s/%s'", dir, p.name[0]);
		close(p.dfd);
		return rc;
	}
	probe_steps(&p, fd);
	close(fd);
	for (int i = 0; i < 3; i++)
		unlinkat(p.dfd, p.name[i], 0);
	close(p.dfd);
	if (!p.lacks)
		return 0;
	return es_error(ES_EINVAL, "The file system of %s lacks %s (%s), which a job folder needs: choose a --job-dir "
			"on a shared POSIX file system such as NAS, CPFS or NFS (README \"The job folder\")",
			shown ? shown : dir, p.lacks, p.err ? strerror(p.err) : "it did not refuse a second create");
}

int es_fs_mkdir_nofollow(const char *path, mode_t mode)
{
	int dfd;
	const char *name;
	int rc = beneath(path, &dfd, &name);
	if (rc)
		return rc;
	struct stat st;
	if (mkdirat(dfd, name, mode) == 0)
		rc = 0;
	else if (errno != EEXIST)
		rc = es_error_errno(ES_EIO, "cannot create folder '%s'", path);
	else if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		rc = es_error_errno(ES_EIO, "cannot stat '%s'", path);
	else if (S_ISLNK(st.st_mode))
		rc = es_error(ES_EINVAL, "%s is a symbolic link; eshard-mpi does not follow links out of a job folder", path);
	else if (!S_ISDIR(st.st_mode))
		rc = es_error(ES_EINVAL, "%s is not a folder", path);
	close_dir(dfd);
	return rc;
}

/* mkdir of p, making the missing folders above it first: the leaf is tried first, since its
 * parents nearly always exist (an attempt's work folder in its attempt folder) and every mkdir
 * is a round trip on NFS; the walk up happens only on ENOENT. p is restored on return. */
static int mkdirs_leaf_first(struct es_buf *p, mode_t mode)
{
	if (mkdir(p->data, mode) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return es_error_errno(ES_EIO, "cannot create folder '%s'", p->data);
	size_t len = strlen(p->data);
	while (len > 1 && p->data[len - 1] == '/')
		len--;
	while (len > 0 && p->data[len - 1] != '/')
		len--;
	while (len > 1 && p->data[len - 1] == '/')
		len--;
	if (len == 0 || (len == 1 && p->data[0] == '/')) /* no parent left to make */
		return es_error_errno(ES_EIO, "cannot create folder '%s'", p->data);
	char c = p->data[len];
	p->data[len] = '\0';
	int rc = mkdirs_leaf_first(p, mode);
	p->data[len] = c;
	if (!rc && mkdir(p->data, mode) != 0 && errno != EEXIST)
		rc = es_error_errno(ES_EIO, "cannot create folder '%s'", p->data);
	return rc;
}

int es_fs_mkdirs(const char *path, mode_t mode)
{
	struct es_buf p = ES_BUF_INIT;
	int rc = es_buf_adds(&p, path);
	if (!rc)
		rc = mkdirs_leaf_first(&p, mode);
	if (!rc) {
		struct stat st;
		if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
			rc = es_error(ES_EIO, "cannot create folder '%s': a file is in the way", path);
	}
	es_buf_free(&p);
	return rc;
}

static int remove_at(int parent_fd, const char *name, const char *shown)
{
	if (unlinkat(parent_fd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return es_error_errno(ES_EIO, "cannot remove '%s'", shown);
	int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return es_error_errno(ES_EIO, "cannot open folder '%s' to remove it", shown);
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return es_error_errno(ES_EIO, "cannot read folder '%s'", shown);
	}
	int rc = 0;
	struct dirent *e;
	while (!rc && (e = readdir(d)) != NULL) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		rc = remove_at(dirfd(d), e->d_name, shown);
	}
	closedir(d);
	if (!rc && unlinkat(parent_fd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
		rc = es_error_errno(ES_EIO, "cannot remove folder '%s'", shown);
	return rc;
}

int es_fs_remove_tree(const char *path)
{
	int dfd;
	const char *name;
	int rc = beneath(path, &dfd, &name);
	if (rc)
		return rc == ES_ENOENT ? 0 : rc;
	rc = remove_at(dfd, name, path);
	close_dir(dfd);
	return rc;
}

int es_fs_read_fd_sized(int fd, struct es_buf *out, size_t max, off_t size, const char *what)
{
	es_buf_reset(out);
	for (;;) {
		size_t want = size >= 0 && (uint64_t)size < max ? (size_t)size + 1 : 65536;
		if (want < 65536 && out->len)
			want = 65536; /* the file is not what fstat said: read on in big steps */
		int rc = es_buf_grow(out, want);
		if (rc)
			return rc;
		size_t ask = out->cap - out->len - 1;
		ssize_t n = read(fd, out->data + out->len, ask);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return es_error_errno(ES_EIO, "cannot read '%s'", what);
		}
		if (n == 0)
			return 0;
		out->len += (size_t)n;
		out->data[out->len] = '\0';
		if (out->len > max)
			return es_error(ES_ENOMEM, "file '%s' is larger than %zu bytes", what, max);
		/* Exactly the size fstat gave, in a read that returned less than asked for: the end
		 * (no second read() to see 0; each is a round trip on NFS). Anything else reads on. */
		if (size >= 0 && out->len == (size_t)size && (size_t)n < ask)
			return 0;
	}
}

int es_fs_read_fd(int fd, struct es_buf *out, size_t max, const char *what)
{
	return es_fs_read_fd_sized(fd, out, max, -1, what);
}

/* What a file that is not a regular one is, for a message. */
static const char *file_kind(mode_t mode)
{
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISDIR(mode))
		return "a folder";
	return "not a regular file";
}

/* es_fs_open_read() relative to dfd (AT_FDCWD: name is the whole path), the file's fstat into
 * *stp (may be NULL). The open is
 * O_NONBLOCK because opening a FIFO to read blocks until a writer comes, which may be never;
 * once fstat() says regular file the flag goes again (it means nothing for regular files, but
 * the descriptor is handed on). */
static int open_regular_sized(int dfd, const char *name, int flags, const char *path, int *fd, struct stat *stp,
			      int handed_on)
{
	*fd = openat(dfd, name, flags | O_NONBLOCK | O_CLOEXEC);
	if (*fd < 0) {
		if (errno == ENOENT)
			return 1;
		if (errno == ELOOP && (flags & O_NOFOLLOW))
			return es_error(ES_EINVAL, "%s is a symbolic link; eshard-mpi does not follow links out of a job folder",
					path);
		if (errno == ENXIO) /* a socket, or a device without its driver */
			return es_error(ES_EINVAL, "%s is not a regular file; eshard-mpi reads only regular files", path);
		return es_error_errno(ES_EIO, "cannot open '%s'", path);
	}
	struct stat st;
	int rc = 0;
	if (fstat(*fd, &st) != 0)
		rc = es_error_errno(ES_EIO, "cannot stat '%s'", path);
	else if (!S_ISREG(st.st_mode))
		rc = es_error(ES_EINVAL, "%s is %s, not a regular file; eshard-mpi reads only regular files", path,
			      file_kind(st.st_mode));
	int fl = rc || !handed_on ? 0 : fcntl(*fd, F_GETFL);
	if (!rc && handed_on && (fl < 0 || fcntl(*fd, F_SETFL, fl & ~O_NONBLOCK) != 0))
		rc = es_error_errno(ES_EIO, "cannot open '%s'", path);
	if (rc) {
		close(*fd);
		*fd = -1;
	} else if (stp) {
		*stp = st;
	}
	return rc;
}

static int open_regular_at(int dfd, const char *name, int flags, const char *path, int *fd)
{
	return open_regular_sized(dfd, name, flags, path, fd, NULL, 1);
}

int es_fs_open_read(const char *path, int flags, int *fd)
{
	return open_regular_at(AT_FDCWD, path, flags, path, fd);
}

int es_fs_read_file(const char *path, struct es_buf *out, size_t max)
{
	return es_fs_read_file_stat(path, out, max, NULL);
}

int es_fs_read_file_stat(const char *path, struct es_buf *out, size_t max, struct stat *st)
{
	int dfd, fd, rc;
	const char *name;
	struct stat own, *sp = st ? st : &own;
	/* Below the boundary the file itself is not read through a link either. Read here and
	 * closed, the descriptor keeps O_NONBLOCK (nothing for a regular file) and is read in one
	 * step of the size fstat() gave. */
	if (open_beneath_fast(path, O_RDONLY | O_NONBLOCK, &fd) == 0) {
		if (fstat(fd, sp) == 0 && S_ISREG(sp->st_mode))
			goto read;
		close(fd); /* not a regular file: the walk says so */
	}
	if ((rc = beneath(path, &dfd, &name)) != 0)
		return rc;
	rc = open_regular_sized(dfd, name, O_RDONLY | (dfd == AT_FDCWD ? 0 : O_NOFOLLOW), path, &fd, sp, 0);
	int err = errno;
	close_dir(dfd);
	errno = err;
	if (rc == 1)
		return es_error_errno(ES_ENOENT, "cannot open '%s'", path);
	if (rc)
		return rc;
read:
	rc = es_fs_read_fd_sized(fd, out, max ? max : (size_t)64 << 20, sp->st_size, path);
	close(fd);
	return rc;
}

int es_fs_read_tail(const char *path, int max_lines, size_t max_bytes, struct es_buf *out)
{
	int cut = 0, fd;
	es_buf_reset(out);
	es_log_quiet_begin();
	int rc = es_fs_open_read(path, O_RDONLY | O_NOFOLLOW, &fd);
	es_log_quiet_end();
	if (rc)
		return -1;
	struct stat st;
	if (fstat(fd, &st) == 0 && (size_t)st.st_size > max_bytes) {
		lseek(fd, st.st_size - (off_t)max_bytes, SEEK_SET);
		cut = 1;
	}
	es_log_quiet_begin();
	rc = es_fs_read_fd(fd, out, max_bytes, path);
	es_log_quiet_end();
	close(fd);
	if (rc) {
		es_buf_reset(out);
		return -1;
	}
	/* Past the byte bound the first line is a piece of a line: drop it. */
	const char *nl = cut ? memchr(out->data, '\n', out->len) : NULL;
	size_t from = nl && (size_t)(nl - out->data) + 1 < out->len ? (size_t)(nl - out->data) + 1 : 0;
	size_t end = out->len;
	if (end > from && out->data[end - 1] == '\n')
		end--;
	size_t k = end;
	for (int seen = 0; k > from; k--)
		if (out->data[k - 1] == '\n' && ++seen == max_lines)
			break;
	if (k < from)
		k = from;
	cut |= k > 0;
	memmove(out->data, out->data + k, end - k);
	es_buf_setlen(out, end - k);
	return cut;
}

/* Does this log line read like an error? Python's last traceback line ("ValueError: ..."), a
 * logger's "ERROR" and most tools' "error:" all contain one of these. */
static int error_like(const char *l)
{
	return strstr(l, "rror") || strstr(l, "ERROR") || strstr(l, "xception") || strstr(l, "Killed");
}

/* src into out of n bytes, cut to fit. */
static void copy_cut(char *out, size_t n, const char *src)
{
	size_t k = strlen(src);
	if (k >= n)
		k = n - 1;
	memcpy(out, src, k);
	out[k] = '\0';
}

void es_fs_log_error_line(const char *path, char *out, size_t n)
{
	struct es_buf t = ES_BUF_INIT;
	char line[512], last[512] = "";
	out[0] = '\0';
	if (es_fs_read_tail(path, 40, 16384, &t) >= 0 && t.len) {
		for (const char *l = t.data; *l;) {
			const char *nl = strchr(l, '\n');
			size_t len = nl ? (size_t)(nl - l) : strlen(l), k = 0;
			for (size_t j = 0; j < len && k + 1 < sizeof(line); j++) {
				unsigned char ch = (unsigned char)l[j];
				line[k++] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
			}
			line[k] = '\0';
			l += len + (nl != NULL);
			if (strspn(line, " ?") == k)
				continue;
			snprintf(last, sizeof(last), "%s", line);
			if (error_like(line))
				copy_cut(out, n, line);
		}
		if (!out[0])
			copy_cut(out, n, last);
	}
	es_buf_free(&t);
}

int es_fs_exists_fresh(const char *path)
{
	/* O_NONBLOCK: a FIFO in its place exists, and must not block the open until a writer comes. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 1;
	}
	if (errno == ENOENT || errno == ENOTDIR)
		return 0;
	return errno == EACCES || errno == EISDIR || errno == ENXIO ? 1 : es_error_errno(ES_EIO, "cannot open '%s'", path);
}

int es_fs_listed_ino(const char *dir, const char *name, ino_t *ino)
{
	DIR *d = opendir(dir);
	if (!d)
		return es_error_errno(ES_EIO, "cannot read folder '%s'", dir);
	struct dirent *e;
	int rc = 1;
	errno = 0;
	while (rc == 1 && (e = readdir(d)) != NULL)
		if (!strcmp(e->d_name, name)) {
			*ino = e->d_ino;
			rc = 0;
		}
	if (rc == 1 && errno)
		rc = es_error_errno(ES_EIO, "cannot read folder '%s'", dir);
	closedir(d);
	return rc;
}

int es_fs_exists(const char *path)
{
	struct stat st;
	if (lstat(path, &st) == 0)
		return 1;
	if (errno == ENOENT || errno == ENOTDIR)
		return 0;
	return es_error_errno(ES_EIO, "cannot stat '%s'", path);
}

int es_fs_expand_user(const char *path, struct es_buf *out)
{
	es_buf_reset(out);
	if (path[0] == '~' && (path[1] == '\0' || path[1] == '/')) {
		const char *home = getenv("HOME");
		if (home && *home) {
			int rc = es_buf_adds(out, home);
			return rc ? rc : es_buf_adds(out, path + 1);
		}
	}
	return es_buf_adds(out, path);
}

/* Drop the last component of an absolute path held in p (never above "/"). */
static void pop_component(struct es_buf *p)
{
	while (p->len > 1 && p->data[p->len - 1] != '/')
		p->len--;
	if (p->len > 1)
		p->len--;
	p->data[p->len] = '\0';
}

int es_fs_getcwd(struct es_buf *out)
{
	es_buf_reset(out);
	for (size_t size = 256;; size *= 2) {
		int rc = es_buf_grow(out, size);
		if (rc)
			return rc;
		if (getcwd(out->data, size + 1)) {
			out->len = strlen(out->data); /* within the room grown above */
			return 0;
		}
		if (errno != ERANGE)
			return es_error_errno(ES_EIO, "cannot get the current folder");
	}
}

int es_fs_readlink(int dirfd, const char *path, struct es_buf *out)
{
	es_buf_reset(out);
	for (size_t size = 256;; size *= 2) {
		int rc = es_buf_grow(out, size);
		if (rc)
			return rc;
		ssize_t n = readlinkat(dirfd, path, out->data, size + 1);
		if (n < 0)
			return es_error_errno(ES_EIO, "cannot read link '%s'", path);
		if ((size_t)n <= size) {
			out->len = (size_t)n; /* within the room grown above; readlink adds no NUL */
			out->data[n] = '\0';
			return 0;
		}
	}
}

static int resolve_from(const char *base, const char *path, struct es_buf *out);

int es_fs_resolve(const char *path, struct es_buf *out)
{
	return resolve_from(NULL, path, out);
}

int es_fs_resolve_under(const char *base, const char *rel, struct es_buf *out, struct stat *st)
{
	int fd, rc;
	/* A path that exists with no link and no "." or ".." on the way is its own resolution:
	 * one openat2 from the walk cache tells (status resolves every done shard's result). */
	es_buf_reset(out);
	if (rel[0] != '/' && !es_buf_printf(out, "%s/%s", base, rel) &&
	    open_beneath_fast(out->data, O_PATH | O_NOFOLLOW, &fd) == 0) {
		rc = st && fstat(fd, st) != 0 ? -1 : 0;
		close(fd);
		if (!rc)
			return 0;
	}
	rc = rel[0] == '/' ? resolve_from(NULL, rel, out) : resolve_from(base, rel, out);
	if (!rc && st && lstat(out->data, st) != 0)
		memset(st, 0, sizeof(*st));
	return rc;
}

/* es_fs_resolve of path, or (base not NULL: an absolute path without links, path relative)
 * of base/path with only path's components looked at. */
static int resolve_from(const char *base, const char *path, struct es_buf *out)
{
	/* Walk the components like Python's posixpath._joinrealpath: each existing symlink is
	 * replaced by its target and ".." is applied to what was resolved so far. A component
	 * that does not exist is simply "not a link": the later ones are still checked, since a
	 * ".." can lead back into existing folders and to a symlink. */
	struct es_buf todo = ES_BUF_INIT, link = ES_BUF_INIT;
	int rc = 0, links = 0;
	es_buf_reset(out);
	if (path[0] != '/' && !base) {
		rc = es_fs_getcwd(&todo);
		if (!rc)
			rc = es_buf_addc(&todo, '/');
	}
	if (!rc)
		rc = es_buf_adds(&todo, path);
	if (!rc)
		rc = es_buf_adds(out, base ? base : "/");
	while (!rc && out->len > 1 && out->data[out->len - 1] == '/')
		es_buf_setlen(out, out->len - 1);
	size_t pos = 0;
	while (!rc && pos < todo.len) {
		while (pos < todo.len && todo.data[pos] == '/')
			pos++;
		size_t start = pos;
		while (pos < todo.len && todo.data[pos] != '/')
			pos++;
		size_t n = pos - start;
		const char *comp = todo.data + start;
		if (n == 0 || (n == 1 && comp[0] == '.'))
			continue;
		if (n == 2 && comp[0] == '.' && comp[1] == '.') {
			pop_component(out);
			continue;
		}
		size_t before = out->len;
		if (out->len > 1)
			rc = es_buf_addc(out, '/');
		if (!rc)
			rc = es_buf_add(out, comp, n);
		if (rc)
			continue;
		struct stat st;
		if (lstat(out->data, &st) != 0) {
			if (errno != ENOENT && errno != ENOTDIR)
				rc = es_error_errno(ES_EIO, "cannot stat '%s'", out->data);
			continue;
		}
		if (!S_ISLNK(st.st_mode))
			continue;
		if (++links > 40) {
			rc = es_error(ES_EINVAL, "too many levels of symbolic links in '%s'", path);
			break;
		}
		/* Replace the link by its target followed by what is left to do. */
		if ((rc = es_fs_readlink(AT_FDCWD, out->data, &link)) != 0)
			break;
		rc = es_buf_addc(&link, '/');
		if (!rc)
			rc = es_buf_add(&link, todo.data + pos, todo.len - pos);
		if (rc)
			break;
		es_buf_setlen(out, before ? before : 1);
		if (out->len == 0)
			rc = es_buf_adds(out, "/");
		if (link.data[0] == '/')
			es_buf_setlen(out, 1);
		struct es_buf swap = todo;
		todo = link;
		link = swap;
		pos = 0;
	}
	es_buf_free(&todo);
	es_buf_free(&link);
	return rc;
}

int es_fs_check_output(const char *output, const char *job_dir, const char *own, struct es_buf *resolved)
{
	struct es_buf jd = ES_BUF_INIT, out = ES_BUF_INIT;
	int rc = es_fs_resolve(job_dir, &jd);
	if (!rc)
		rc = es_fs_resolve(output, &out);
	/* The output relative to the job folder, when it is the folder or lies below it. */
	const char *rest = NULL;
	size_t lj = jd.len;
	if (!rc && !strncmp(out.data, jd.data, lj)) {
		if (out.data[lj] == '\0')
			rest = "";
		else if (out.data[lj] == '/')
			rest = out.data + lj + 1;
		else if (lj == 1)
			rest = out.data + 1; /* the job folder is "/" */
	}
	if (rest && strcmp(rest, own)) {
		struct es_buf shown = ES_BUF_INIT; /* the name given, and where it leads when that differs */
		es_buf_adds(&shown, output);
		if (strcmp(output, out.data))
			es_buf_printf(&shown, " (%s)", out.data);
		rc = es_error(ES_EUSAGE, "Output %s is inside the job folder %s, where this command writes only %s/%s: "
			      "give a path outside the job folder", shown.len ? shown.data : output, jd.data, jd.data, own);
		es_buf_free(&shown);
	}
	if (!rc && resolved) {
		es_buf_reset(resolved);
		rc = es_buf_add(resolved, out.data, out.len);
	}
	es_buf_free(&jd);
	es_buf_free(&out);
	return rc;
}

/* The names of the open folder fd (path, for the error) into out, sorted; fd stays open;
 * *whole 0 when an error of the file system ended the listing early (else 1).
 * getdents64 on the descriptor itself, not opendir: opendir costs a fstat and a 32 KiB buffer
 * from the heap, and status lists one folder per shard (100,000 at once). */
static int list_fd(int fd, const char *path, struct es_strv *out, int *whole)
{
	/* Aligned for the records' 64-bit fields. */
	union {
		char b[32768];
		struct dirent64 d;
	} buf;
	int rc = 0;
	for (;;) {
		ssize_t n = getdents64(fd, buf.b, sizeof(buf.b));
		if (n < 0 && errno == EINTR)
			continue;
		/* An error ends the listing with the names read so far, as the readdir() loop did
		 * before: a listing only ever says where to look (fs.h), never that work exists. */
		if (n <= 0) {
			*whole = n == 0;
			break;
		}
		for (ssize_t off = 0; !rc && off < n;) {
			const struct dirent64 *e = (const struct dirent64 *)(buf.b + off);
			off += e->d_reclen;
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				rc = es_strv_push(out, strdup(e->d_name));
		}
		if (rc) {
			rc = es_error(ES_ENOMEM, "out of memory listing folder '%s'", path);
			break;
		}
	}
	if (!rc)
		es_strv_sort_unique(out);
	return rc;
}

int es_fs_list_dir(const char *path, struct es_strv *out)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ENOTDIR ? 0 : es_error_errno(ES_EIO, "cannot read folder '%s'", path);
	int whole = 1;
	int rc = list_fd(fd, path, out, &whole);
	close(fd);
	return rc;
}

static void stamp_take(struct es_fs_dirstamp *s, const struct stat *st)
{
	s->dev = st->st_dev;
	s->ino = st->st_ino;
	s->size = st->st_size;
	s->nlink = st->st_nlink;
	s->mtime = st->st_mtim;
	s->ctime = st->st_ctim;
}

static int stamp_same(const struct es_fs_dirstamp *s, const struct stat *st)
{
	return s->dev == st->st_dev && s->ino == st->st_ino && s->size == st->st_size && s->nlink == st->st_nlink &&
	       s->mtime.tv_sec == st->st_mtim.tv_sec && s->mtime.tv_nsec == st->st_mtim.tv_nsec &&
	       s->ctime.tv_sec == st->st_ctim.tv_sec && s->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

static int stamp_same_stat(const struct stat *a, const struct stat *b)
{
	struct es_fs_dirstamp s;
	stamp_take(&s, a);
	return stamp_same(&s, b);
}

/* A folder's times change with every entry made, renamed or removed in it, but only as finely
 * as the file system's clock ticks (a few ms on a local disk, a second on some servers): an
 * entry made in the tick of the listing leaves the same times. So a stamp is trusted once a
 * listing that began settle_secs after it was first seen found it unchanged: that listing saw
 * every entry of that tick. */
int es_fs_list_dir_if_changed(const char *path, struct es_fs_dirstamp *stamp, double settle_secs, int may_defer,
			      struct es_strv *out, int *listed)
{
	*listed = ES_FS_LISTED;
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		stamp->valid = 0;
		return errno == ENOENT || errno == ENOTDIR ? 0 : es_error_errno(ES_EIO, "cannot read folder '%s'", path);
	}
	struct stat before, after;
	int have = fstat(fd, &before) == 0;
	double mono = es_time_mono();
	if (have && stamp->valid && stamp_same(stamp, &before) && stamp->confirmed) {
		close(fd);
		*listed = ES_FS_UNCHANGED;
		return 0;
	}
	if (may_defer) {
		close(fd);
		*listed = ES_FS_UNLISTED;
		return 0;
	}
	int whole = 1;
	int rc = list_fd(fd, path, out, &whole);
	int same_after = !rc && whole && have && fstat(fd, &after) == 0 && stamp_same_stat(&before, &after);
	close(fd);
	if (!rc && !whole)
		*listed = ES_FS_LISTED_PART;
	if (!same_after) {
		/* Changed while listed, no stat, or a listing cut short by an error (kept, it would
		 * stand for the folder until the folder changed): list again next time. */
		stamp->valid = 0;
	} else if (stamp->valid && stamp_same(stamp, &before)) {
		if (mono - stamp->first_mono >= settle_secs)
			stamp->confirmed = 1;
	} else {
		stamp_take(stamp, &before);
		stamp->valid = 1;
		stamp->confirmed = 0;
		stamp->first_mono = mono;
	}
	return rc;
}

int es_fs_copy_file(const char *src, const char *dst)
{
	int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return es_error_errno(ES_EIO, "cannot open '%s'", src);
	struct stat st;
	if (fstat(in, &st) != 0) {
		close(in);
		return es_error_errno(ES_EIO, "cannot stat '%s'", src);
	}
	int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 07777);
	if (out < 0) {
		close(in);
		return es_error_errno(ES_EIO, "cannot create '%s'", dst);
	}
	int rc = 0;
	char buf[65536];
	for (;;) {
		ssize_t n = read(in, buf, sizeof(buf));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = es_error_errno(ES_EIO, "cannot read '%s'", src);
			break;
		}
		if (n == 0)
			break;
		if ((rc = es_fs_write_all(out, buf, (size_t)n, dst)) != 0)
			break;
	}
	if (!rc) {
		struct timespec ts[2] = { st.st_atim, st.st_mtim };
		if (futimens(out, ts) != 0 || fchmod(out, st.st_mode & 07777) != 0)
			rc = es_error_errno(ES_EIO, "cannot copy metadata to '%s'", dst);
	}
	if (!rc && fsync(out) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync '%s'", dst);
	close(in);
	close(out);
	return rc;
}

/* A Gluster or FUSE client whose server restarts answers ENOTCONN, NFS hard mounts EIO after a
 * server failover, and a handle the server forgot ESTALE; a dead mount answers ENOTCONN for
 * good. Which of the two it is only time tells: the worker retries for a bounded time. */
int es_fs_transient(int err)
{
	return err == ENOTCONN || err == EIO || err == ESTALE;
}

int es_fs_reachable(const char *dir)
{
	struct statfs sf;
	if (statfs(dir, &sf) != 0)
		return es_error_errno(ES_EIO, "cannot reach '%s'", dir);
	return 0;
}
