/*
 * fs: the one way to touch files that another node may read.
 *
 * Contract after a crash at any point:
 *  - es_fs_write_atomic(): the target holds either its old content or the whole new content;
 *    a temporary ".<name>.<32hex>.tmp" may be left in the same folder, never a partial target.
 *  - es_fs_publish_exclusive(): the target either does not exist or holds the whole content;
 *    of several concurrent publishers exactly one wins (link() is atomic on NFSv3+).
 *  - es_fs_create_exclusive(): O_CREAT|O_EXCL; the content is written and fsynced after the
 *    create, so a reader may briefly see an empty or partial file (as in the reference's claim).
 * Every function reports its own failure through es_error() with the path, and returns 0,
 * a positive "lost the race" value where documented, or a negative ES_E* code.
 */
#ifndef ESHARD_FS_H
#define ESHARD_FS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "eshard/buf.h"

/* 32 lower-case hex characters from the kernel's CSPRNG (a uuid4-like token) + NUL. */
int es_fs_token(char out[33]);

/* The token of a temporary or a stage folder: 32 lower-case hex characters like es_fs_token()'s
 * (the reference's ".<name>.<32hex>.tmp" form), which also name their maker: its pid (8 hex),
 * a hash of its host's identity (host name, boot id, pid namespace; 8 hex), the low 32 bits of
 * its start time in clock ticks since boot (8 hex), then 8 random ones. Debris sweepers use it
 * to tell a temporary whose maker is gone from one that is being written. */
int es_fs_temp_token(char out[33]);

/* The first 24 hex characters of every es_fs_temp_token() of this process (its pid, host hash
 * and start time) + NUL: a lock records it, so that whoever finds the lock's owner dead can tell
 * that owner's temporaries from those of live writers, on any host. */
void es_fs_temp_maker(char out[25]);

/* Who made the entry named name (".<x>.<32hex>.tmp" or "<x>.preparing.<32hex>")?
 * ES_TEMP_GONE: this host (same host name, boot and pid namespace) and no process with that
 * pid and start time exists, so nothing can still write it; ES_TEMP_LIVE: that process exists;
 * ES_TEMP_UNKNOWN: another host, an earlier boot, or no maker in the token (the reference's
 * random uuid4): nothing here can tell whether its maker lives, so it is never removed. */
enum { ES_TEMP_GONE = 1, ES_TEMP_LIVE = 0, ES_TEMP_UNKNOWN = 2 };
int es_fs_temp_owner(const char *name);

/* Remove the stale temporaries ".<prefix><anything>.<32hex>.tmp" (prefix NULL: any) of folder
 * dir whose maker is gone (es_fs_temp_owner), each with a WARNING naming it; with report_kept,
 * one whose maker cannot be checked is named in a WARNING too ("kept ..."). Returns how many
 * were removed (>= 0) or a negative error. Never follows a link; sub-folders are not entered. */
int es_fs_sweep_temps(const char *dir, const char *prefix, int report_kept);

/* The same for a folder whose only writer is known to be gone (a taken-over attempt's folder:
 * its owner's lease ran out), on any host: remove every temporary untouched for idle_secs. */
int es_fs_sweep_dead_temps(const char *dir, double idle_secs);

/* The temporaries ".<prefix><anything>.<32hex>.tmp" of folder dir, which several writers share
 * (state/done: a shard's done record is published by its attempt or by its backup), after the
 * one writer that matters was found dead (a taken-over lease): remove each that dead_maker made
 * (its es_fs_temp_maker(), NULL or "" when unknown), whatever its age and on any host, each
 * whose maker is gone (es_fs_temp_owner) and, on any host, each untouched for idle_secs (a live
 * writer's temporary lives for the milliseconds between its write and its link). Returns how
 * many were removed. */
int es_fs_sweep_writer_temps(const char *dir, const char *prefix, double idle_secs, const char *dead_maker);

/* The temporaries ".<prefix><anything>.<32hex>.tmp" of folder dir that are the file at path
 * itself (one device and inode): the second name that an exclusive publish (temp + link)
 * leaves when its writer dies between the link and the unlink of its temporary. Removing one
 * is safe at any age and on any host, as its content is the published file's. Returns how many
 * were removed, or a negative ES_E* code when path cannot be checked. */
int es_fs_sweep_links_of(const char *dir, const char *prefix, const char *path);

/* The job folder is a boundary. Once set (es_manifest_load sets it to the job folder it
 * loaded; NULL clears it), every function below that creates, renames, links, removes or reads
 * a path inside root opens the folders between root and the path's last component one at a time
 * with O_NOFOLLOW and works relative to the last one (openat, renameat, linkat, mkdirat): a
 * symbolic link (or "..") anywhere below root is ES_EINVAL with a message naming it, never
 * followed, even when planted after the manifest was checked; es_fs_read_file does not read
 * the file itself through a link either. Paths outside root behave as before. Thread-safe. */
void es_fs_set_boundary(const char *root);
/* Whether path is below the boundary (a read of it then refuses a link on the way and at the end). */
int es_fs_below_boundary(const char *path);
/* The walk cache, for a reader of many files below the boundary (status, a job view) and a
 * worker's claim and shard: from begin to end (calls nest), this thread keeps the folders it
 * walks up to three levels below the boundary open (state/done, attempts/<shard>, an attempt
 * folder, ...) and walks from them, as from the boundary, with O_NOFOLLOW, instead of from the
 * boundary each time; a kept folder fsynced once keeps that descriptor for its next fsync.
 * What it keeps is the folder it found: a folder replaced in between (a link planted, a job
 * folder made anew) is not seen until end. */
void es_fs_walk_cache_begin(void);
void es_fs_walk_cache_end(void);
/* The identity of path, below the boundary, without following a link on the way or at the end
 * (an fstatat from its folder, walked as a read walks, from the walk cache when on: one call
 * once the folder is kept). 0 with *st; -1 when path is not below the boundary or anything
 * fails: nothing is reported, and the caller takes another way. */
struct stat;
int es_fs_lstat_beneath(const char *path, struct stat *st);

/* Write data to <dir>/.<name>.<32hex>.tmp, fsync, rename over path, fsync the folder. */
int es_fs_write_atomic(const char *path, const void *data, size_t len);
/* Write a temporary as above, then link() it to path. Returns 0 when published, 1 when path
 * already existed (someone else won), negative on error. The temporary is always removed. */
int es_fs_publish_exclusive(const char *path, const void *data, size_t len);
/* open(O_CREAT|O_EXCL|O_WRONLY, 0644), write, fsync. 0 created, 1 already existed. */
int es_fs_create_exclusive(const char *path, const void *data, size_t len);
/* Create "<dir>/.<name>.<32hex>.tmp" beside target, exclusively (O_EXCL, mode 0644), for a
 * streamed write that es_fs_rename() then publishes. tmp gets its path; *fd the descriptor. */
int es_fs_open_temp(const char *target, struct es_buf *tmp, int *fd);
/* Create a new file exclusively (O_CREAT|O_EXCL|O_WRONLY, or O_RDWR when rw); *fd on success. */
int es_fs_open_new(const char *path, mode_t mode, int rw, int *fd);
/* rename(from, to) and fsync the folder(s) of to (and of from when it differs). */
int es_fs_rename(const char *from, const char *to);
/* Publish a fully written (and fsynced) folder: rename(from, to), then fsync the parent of to.
 * Returns 0, 1 when to already exists (EEXIST or ENOTEMPTY: someone else published first; from
 * is left alone), 2 when the rename was refused with EBUSY, EPERM, EACCES or EXDEV (to is an
 * empty folder that no rename may replace: a mount point the kernel did not name as one, a
 * folder of another user under a sticky parent; nothing is said), or negative on error. */
int es_fs_publish_dir(const char *from, const char *to);
/* Move one entry of a stage folder into the folder being published (prepare.h: a mount point
 * as job folder): rename(from, to), then fsync the folders of to and from. Returns 0, 1 when
 * from (or its folder) is missing, that is when another publisher of the same stage moved it
 * first, or negative on error. An existing to is replaced as rename(2) does (a file, or an
 * empty folder); the caller makes sure none is there. */
int es_fs_move_entry(const char *from, const char *to);
/* Is the folder path the root of a mount (rename(2) over it fails with EBUSY)? 1 yes, 0 no,
 * negative when it cannot be stat'ed. statx's STATX_ATTR_MOUNT_ROOT (Linux 5.8) decides;
 * before that, a device other than its parent's. */
int es_fs_is_mount_point(const char *path);
/* Does the file system of folder dir do what a job folder needs (README "The job folder")?
 * In dir it creates a file with O_CREAT|O_EXCL (a second such create must fail with EEXIST),
 * flocks it, hard-links it, renames a third file over the link, and removes its files again
 * (".eshard-probe-<x>.<temp token>.tmp", which a sweep of dir removes after a crash). 0 when
 * all of that works; ES_EINVAL with a message naming what is missing ("exclusive create",
 * "file locks", "hard links", "rename over a file") and dir when one fails, as on object-storage
 * FUSE mounts; ES_EIO when dir cannot be written at all. The messages name shown (NULL: dir):
 * a caller probes in a fresh folder of its own (prepare's stage), so that a probe killed midway
 * leaves nothing where a reader looks, and names the folder the user chose. */
int es_fs_probe(const char *dir, const char *shown);
/* 1 when err is what a network file system answers while its server or mount is away
 * (ENOTCONN, EIO, ESTALE): a step that failed so may work again once the server is back. */
int es_fs_transient(int err);
/* Whether the server of dir answers now: statfs(), which network file systems send to the
 * server (a cached lookup or attribute could answer for a server that is away). 0, or ES_EIO
 * after es_error_errno(). */
int es_fs_reachable(const char *dir);
/* fsync a folder so that a rename or create in it is durable. */
int es_fs_fsync_dir(const char *dir);
/* fsync the folder that holds path. */
int es_fs_fsync_parent(const char *path);
/* mkdir of one folder inside a job folder: an existing folder is fine, a symbolic link or a
 * file in its place is an error (ES_EINVAL, naming the path): nothing follows a link out of
 * a job folder. */
int es_fs_mkdir_nofollow(const char *path, mode_t mode);
/* mkdir -p with mode; existing folders are fine. */
int es_fs_mkdirs(const char *path, mode_t mode);
/* rm -rf; a missing path is fine. Never follows symlinks. */
int es_fs_remove_tree(const char *path);
/* Read fd from its offset to the end into out (replacing its content); ES_ENOMEM past max
 * bytes. what names the file in messages. */
int es_fs_read_fd(int fd, struct es_buf *out, size_t max, const char *what);
/* The same for a regular file whose size fstat() gave (size, or -1 when unknown), read from
 * offset 0: a read that brings the content to exactly that size and returns less than asked
 * for ends it, so a small file costs one read() and not two. */
int es_fs_read_fd_sized(int fd, struct es_buf *out, size_t max, off_t size, const char *what);
/* Open a regular file to read it (flags: O_RDONLY or O_RDWR, with O_NOFOLLOW to refuse a
 * symbolic link), as it is (no walk from the boundary). Whatever else may lie in a job folder,
 * a reader never blocks nor reads it: the open is O_NONBLOCK (opening a FIFO waits for a
 * writer, perhaps for ever; the flag is cleared once fstat says regular file), and a FIFO,
 * socket, device or folder is ES_EINVAL "<path> is a FIFO, not a regular file; ...". Returns 0
 * with *fd, 1 when path does not exist (ENOENT; no message: what that means is the caller's
 * to say), negative after es_error(). */
int es_fs_open_read(const char *path, int flags, int *fd);
/* Read a whole regular file into out (replacing its content), opened as es_fs_open_read does
 * (below the boundary walked from it and O_NOFOLLOW); fails past max bytes (0: 64 MiB). A
 * missing file is ES_ENOENT. */
int es_fs_read_file(const char *path, struct es_buf *out, size_t max);
/* The same, with the file's identity as read into *st (may be NULL): what a reader that reads
 * again only what changed compares next time, without a stat of its own. Below the boundary,
 * with a folder of the walk cache above the file, the file is opened in one call (openat2,
 * refusing links as the walk does) instead of a folder at a time. */
int es_fs_read_file_stat(const char *path, struct es_buf *out, size_t max, struct stat *st);
/* The last max_lines lines of a file, from at most its last max_bytes bytes, into out (replacing
 * its content; a line cut by the byte bound is dropped, the trailing newline too). Returns 1 when
 * something before them was left out, 0 when out is the whole file, and -1 when the file cannot
 * be read (out empty; no message: a missing log is normal for an attempt that never started),
 * which includes a link or anything but a regular file (es_fs_open_read). */
int es_fs_read_tail(const char *path, int max_lines, size_t max_bytes, struct es_buf *out);
/* The line of a log a user would look for first, into out of n bytes ("" when the log is empty,
 * missing or unreadable): of its last 40 lines, the last that reads like an error (Python's
 * "ValueError: ...", a logger's "ERROR", "error:", "Exception", "Killed"), else the last that
 * is not blank. Control bytes become '?' so that the line stays one line on a terminal. */
void es_fs_log_error_line(const char *path, char *out, size_t n);
/* The current folder, however long (getcwd(3) into a buffer that grows). */
int es_fs_getcwd(struct es_buf *out);
/* The target of the symbolic link at path (relative to dirfd, or AT_FDCWD), however long. 0, or
 * ES_EIO after es_error() when it cannot be read (not a link, gone). */
int es_fs_readlink(int dirfd, const char *path, struct es_buf *out);
/* Like realpath(3), but a missing tail is allowed and normalized lexically: symlinks are
 * resolved component by component and ".." is applied after resolution (Python's
 * os.path.realpath(strict=False)). A relative path is taken against the CWD. */
int es_fs_resolve(const char *path, struct es_buf *out);
/* es_fs_resolve of base/rel where base is already resolved (absolute, no link in it): only
 * rel's components are looked at (a record's output path below the job folder: four lookups,
 * not one per folder from the root). rel absolute: es_fs_resolve(rel). With st not NULL,
 * *st is the lstat() of the resolution, st_mode 0 when that cannot be had (no such file): the
 * resolution's own descriptor gives it when it opened one (status checks every done shard's
 * result so, one path walk less). */
int es_fs_resolve_under(const char *base, const char *rel, struct es_buf *out, struct stat *st);
/* A file a command writes where the user says (merge, verify and run --output, report
 * --output) must not replace what the job needs: output and job_dir are resolved (es_fs_resolve:
 * ".." and symbolic links, a missing tail allowed), and an output that is the job folder or lies
 * below it is ES_EUSAGE, naming it and the job folder, unless it is <job_dir>/<own>, the file
 * the command writes there itself (report.html, merged.jsonl). So the manifest, the recipe, a
 * shard, a record, a lock, an attempt's output, merge.json and the other command's file are
 * never overwritten, whichever name reaches them. resolved (may be NULL) gets the resolved
 * output. */
int es_fs_check_output(const char *output, const char *job_dir, const char *own, struct es_buf *resolved);
/* Expand a leading "~" or "~/" to $HOME. */
int es_fs_expand_user(const char *path, struct es_buf *out);
/* Does a file that another node publishes exist? 1 yes, 0 no, negative on an I/O error.
 * open(), not stat(): on NFS an open revalidates the entry (close-to-open consistency), where
 * a cached negative lookup could hide a fresh marker
 * (docs/design.md#terminal-fences-never-trust-an-absent-file). A path that is there but cannot be
 * opened (permissions, a folder, socket or FIFO in the way) exists; the open is O_NONBLOCK, so a
 * FIFO does not block it. */
int es_fs_exists_fresh(const char *path);

/* The inode number of the entry name of folder dir as a listing of dir (readdir) gives it: 0
 * with *ino, 1 when the listing has no such entry, negative on an I/O error. A path lookup may
 * be answered from the client's cache of names for a while (a FUSE client such as GlusterFS's
 * keeps a name for its entry timeout, an NFS client for its attribute cache time), so that a
 * name still leads to a file another client has renamed away; a fresh listing is read from the
 * file server. */
int es_fs_listed_ino(const char *dir, const char *name, ino_t *ino);
/* 1 if path exists (lstat), 0 if not, negative on another error. */
int es_fs_exists(const char *path);
/* The names in folder path but "." and "..", sorted (es_strv_sort_unique) and appended to out;
 * a missing folder (or a file in its place) has none. One listing, however many entries: what a
 * view of many shards reads instead of one lookup per shard. A listing can be as stale as a
 * lookup on a client that caches metadata, so nothing but a view may decide from it. */
int es_fs_list_dir(const char *path, struct es_strv *out);
/* What es_fs_list_dir_if_changed keeps of a folder between two calls (zeroed: nothing yet). */
struct es_fs_dirstamp {
	int valid;      /* the folder's identity, size, link count and times, as last listed */
	int confirmed;  /* a listing settle_secs after they were first seen found them the same */
	dev_t dev;
	ino_t ino;
	off_t size;
	nlink_t nlink;
	struct timespec mtime, ctime;
	double first_mono; /* when they were first seen (es_time_mono) */
};
/* es_fs_list_dir for a reader that lists the same folder again and again (a kept view): *listed
 * ES_FS_UNCHANGED when the folder's stat (taken on the folder opened, which an NFS client
 * revalidates) is the one of a confirmed stamp: no entry was made, renamed or removed since the
 * last listing, and out is left as it is (the caller keeps that listing); else ES_FS_LISTED and
 * the names appended to out, as es_fs_list_dir; or, when the caller may_defer (it learns of the
 * new entries another way, and lists now and then: jobview.c), ES_FS_UNLISTED: the folder
 * changed (or its stamp is not confirmed yet), nothing was listed, the stamp is as it was. A
 * whole listing (not cut short by an error) that its folder's stat is the same before and after
 * records the stamp; it is confirmed by a listing that begins settle_secs or more after the
 * stamp was first seen and finds it unchanged (a folder's times tick coarsely: an entry made in
 * the tick of a listing keeps them; fs.c). As fresh as the client's attributes of the folder: a
 * view may use it, nothing that decides. ES_FS_LISTED_PART: listed, but the listing was cut
 * short by an error (es_fs_list_dir ends quietly with the names read so far): no caller may
 * keep it. */
enum { ES_FS_UNCHANGED = 0, ES_FS_LISTED = 1, ES_FS_UNLISTED = 2, ES_FS_LISTED_PART = 3 };
int es_fs_list_dir_if_changed(const char *path, struct es_fs_dirstamp *stamp, double settle_secs, int may_defer,
			      struct es_strv *out, int *listed);
/* Copy a file byte for byte with its mode and times (like cp -p); dst is fsynced. */
int es_fs_copy_file(const char *src, const char *dst);
/* Write all bytes to fd (retrying short writes and EINTR). */
int es_fs_write_all(int fd, const void *data, size_t len, const char *what);
/* Join a and b with one '/', into out (replacing its content). */
int es_path_join(struct es_buf *out, const char *a, const char *b);

#endif
