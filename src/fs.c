#include "eshard/fs.h"
#include "eshard/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <dirent.h>
#include <signal.h>
#include <time.h>

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

static uint32_t host_hash(void)
{
	char host[256] = "";
	gethostname(host, sizeof(host) - 1);
	uint32_t h = 2166136261u;
	for (const char *p = host; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h;
}

int es_fs_temp_token(char out[33])
{
	char rnd[33];
	int rc = es_fs_token(rnd);
	if (rc)
		return rc;
	snprintf(out, 33, "%08x%08x%.16s", (unsigned)getpid(), (unsigned)host_hash(), rnd);
	return 0;
}

/* The 32-hex token of ".<x>.<token>.tmp" or "<x>.preparing.<token>", or NULL. */
static const char *token_of(const char *name, size_t *len)
{
	size_t n = strlen(name);
	const char *end = n > 4 && !strcmp(name + n - 4, ".tmp") ? name + n - 4 : name + n;
	if (end - name < 34 || end[-33] != '.')
		return NULL;
	const char *t = end - 32;
	for (int i = 0; i < 32; i++)
		if (!((t[i] >= '0' && t[i] <= '9') || (t[i] >= 'a' && t[i] <= 'f')))
			return NULL;
	*len = 32;
	return t;
}

int es_fs_temp_gone(const char *name, double mtime, double max_age)
{
	size_t len;
	const char *t = token_of(name, &len);
	if (!t)
		return 0;
	unsigned pid = 0, host = 0;
	if (sscanf(t, "%8x%8x", &pid, &host) == 2 && host == host_hash() && pid > 0 && (pid_t)pid != getpid())
		return kill((pid_t)pid, 0) != 0 && errno == ESRCH;
	if (host == host_hash() && (pid_t)pid == getpid())
		return 0;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	return (double)now.tv_sec - mtime > max_age;
}

int es_fs_sweep_temps(const char *dir, const char *prefix, double max_age)
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
		if (!es_fs_temp_gone(n, (double)st.st_mtim.tv_sec, max_age))
			continue;
		if (unlinkat(dirfd(d), n, 0) == 0) {
			removed++;
			es_warning("removed %s/%s, a temporary file left by a process that is gone", dir, n);
		}
	}
	closedir(d);
	return removed;
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
	*fd = open(path, (rw ? O_RDWR : O_WRONLY) | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (*fd < 0)
		return es_error_errno(errno == EEXIST ? ES_EEXIST : ES_EIO, "cannot create '%s'", path);
	return 0;
}

int es_fs_open_temp(const char *target, struct es_buf *tmp, int *fd)
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
	if (!rc)
		rc = es_fs_open_new(tmp->data, 0644, 0, fd);
	return rc;
}

/* Write data into a fresh temporary beside path; its name is left in tmp. */
static int write_temp(const char *path, const void *data, size_t len, struct es_buf *tmp)
{
	int fd;
	int rc = es_fs_open_temp(path, tmp, &fd);
	if (rc)
		return rc;
	rc = es_fs_write_all(fd, data, len, tmp->data);
	if (!rc && fsync(fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync '%s'", tmp->data);
	if (close(fd) != 0 && !rc)
		rc = es_error_errno(ES_EIO, "cannot close '%s'", tmp->data);
	if (rc)
		unlink(tmp->data);
	return rc;
}

int es_fs_write_atomic(const char *path, const void *data, size_t len)
{
	struct es_buf tmp = ES_BUF_INIT;
	int rc = write_temp(path, data, len, &tmp);
	if (!rc) {
		if (rename(tmp.data, path) != 0) {
			rc = es_error_errno(ES_EIO, "cannot rename '%s' to '%s'", tmp.data, path);
			unlink(tmp.data);
		} else {
			rc = es_fs_fsync_parent(path);
		}
	}
	es_buf_free(&tmp);
	return rc;
}

int es_fs_publish_exclusive(const char *path, const void *data, size_t len)
{
	struct es_buf tmp = ES_BUF_INIT;
	int rc = write_temp(path, data, len, &tmp);
	if (!rc) {
		if (link(tmp.data, path) != 0) {
			if (errno == EEXIST)
				rc = 1;
			else
				rc = es_error_errno(ES_EIO, "cannot publish '%s'", path);
		}
		unlink(tmp.data);
		if (rc == 0)
			rc = es_fs_fsync_parent(path);
	}
	es_buf_free(&tmp);
	return rc;
}

int es_fs_create_exclusive(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		if (errno == EEXIST)
			return 1;
		return es_error_errno(ES_EIO, "cannot create '%s'", path);
	}
	int rc = es_fs_write_all(fd, data, len, path);
	if (!rc && fsync(fd) != 0)
		rc = es_error_errno(ES_EIO, "cannot fsync '%s'", path);
	close(fd);
	if (!rc)
		rc = es_fs_fsync_parent(path);
	return rc;
}

int es_fs_rename(const char *from, const char *to)
{
	if (rename(from, to) != 0)
		return es_error_errno(ES_EIO, "cannot rename '%s' to '%s'", from, to);
	int rc = es_fs_fsync_parent(to);
	const char *sf = strrchr(from, '/'), *st = strrchr(to, '/');
	size_t lf = sf ? (size_t)(sf - from) : 0, lt = st ? (size_t)(st - to) : 0;
	if (!rc && (lf != lt || strncmp(from, to, lf) != 0))
		rc = es_fs_fsync_parent(from);
	return rc;
}

int es_fs_publish_dir(const char *from, const char *to)
{
	if (rename(from, to) != 0) {
		if (errno == EEXIST || errno == ENOTEMPTY)
			return 1;
		return es_error_errno(ES_EIO, "cannot rename '%s' to '%s'", from, to);
	}
	return es_fs_fsync_parent(to);
}

int es_fs_mkdir_nofollow(const char *path, mode_t mode)
{
	if (mkdir(path, mode) == 0)
		return 0;
	if (errno != EEXIST)
		return es_error_errno(ES_EIO, "cannot create folder '%s'", path);
	struct stat st;
	if (lstat(path, &st) != 0)
		return es_error_errno(ES_EIO, "cannot stat '%s'", path);
	if (S_ISLNK(st.st_mode))
		return es_error(ES_EINVAL, "%s is a symbolic link; eshard-mpi does not follow links out of a job folder", path);
	if (!S_ISDIR(st.st_mode))
		return es_error(ES_EINVAL, "%s is not a folder", path);
	return 0;
}

int es_fs_mkdirs(const char *path, mode_t mode)
{
	struct es_buf p = ES_BUF_INIT;
	int rc = es_buf_adds(&p, path);
	if (rc)
		return rc;
	for (char *s = p.data + 1; ; s++) {
		if (*s == '/' || *s == '\0') {
			char c = *s;
			*s = '\0';
			if (mkdir(p.data, mode) != 0 && errno != EEXIST) {
				rc = es_error_errno(ES_EIO, "cannot create folder '%s'", p.data);
				break;
			}
			*s = c;
			if (c == '\0')
				break;
		}
	}
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
	return remove_at(AT_FDCWD, path, path);
}

int es_fs_read_fd(int fd, struct es_buf *out, size_t max, const char *what)
{
	es_buf_reset(out);
	for (;;) {
		int rc = es_buf_grow(out, 65536);
		if (rc)
			return rc;
		ssize_t n = read(fd, out->data + out->len, out->cap - out->len - 1);
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
	}
}

int es_fs_read_file(const char *path, struct es_buf *out, size_t max)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return es_error_errno(errno == ENOENT ? ES_ENOENT : ES_EIO, "cannot open '%s'", path);
	int rc = es_fs_read_fd(fd, out, max ? max : (size_t)64 << 20, path);
	close(fd);
	return rc;
}

int es_fs_exists_fresh(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		close(fd);
		return 1;
	}
	if (errno == ENOENT || errno == ENOTDIR)
		return 0;
	return errno == EACCES || errno == EISDIR ? 1 : es_error_errno(ES_EIO, "cannot open '%s'", path);
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

int es_fs_resolve(const char *path, struct es_buf *out)
{
	/* Walk the components like Python's posixpath._joinrealpath: each existing symlink is
	 * replaced by its target and ".." is applied to what was resolved so far. A component
	 * that does not exist is simply "not a link": the later ones are still checked, since a
	 * ".." can lead back into existing folders and to a symlink. */
	struct es_buf todo = ES_BUF_INIT, link = ES_BUF_INIT;
	int rc = 0, links = 0;
	es_buf_reset(out);
	if (path[0] != '/') {
		char cwd[PATH_MAX];
		if (!getcwd(cwd, sizeof(cwd)))
			return es_error_errno(ES_EIO, "cannot get the current folder");
		rc = es_buf_adds(&todo, cwd);
		if (!rc)
			rc = es_buf_addc(&todo, '/');
	}
	if (!rc)
		rc = es_buf_adds(&todo, path);
	if (!rc)
		rc = es_buf_adds(out, "/");
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
		char target[PATH_MAX];
		ssize_t tl = readlink(out->data, target, sizeof(target) - 1);
		if (tl < 0) {
			rc = es_error_errno(ES_EIO, "cannot read link '%s'", out->data);
			break;
		}
		target[tl] = '\0';
		/* Replace the link by its target followed by what is left to do. */
		es_buf_reset(&link);
		rc = es_buf_add(&link, target, (size_t)tl);
		if (!rc)
			rc = es_buf_addc(&link, '/');
		if (!rc)
			rc = es_buf_add(&link, todo.data + pos, todo.len - pos);
		if (rc)
			break;
		es_buf_setlen(out, before ? before : 1);
		if (out->len == 0)
			rc = es_buf_adds(out, "/");
		if (target[0] == '/')
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
