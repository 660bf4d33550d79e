#!/usr/bin/python3
"""A caching passthrough file system for the tests: one shared folder as an NFS client sees it.

    cachefs.py BACKING MOUNTPOINT --cache SECS [--ready FILE] [--no-link]

Mounts BACKING at MOUNTPOINT through FUSE (Debian's python3-fusepy, libfuse 2) with the
kernel's attribute, entry and negative-entry caches all set to SECS, like an NFS client's
actimeo and lookupcache=all: for up to SECS a client keeps believing in a file that another
client removed, does not see one that another client created ("no such file" is cached), and
sees old sizes and times. Like NFS's close-to-open consistency, an open() compares the file's
time with the server's and drops cached data when it changed (auto_cache). The operations
that NFS servers decide (O_CREAT|O_EXCL, link, rename, unlink) go to the backing folder, so
they keep their atomic meaning. flock() is not passed on: the kernel keeps it within this one
mount, as on file systems where locks are local to one client.

--no-link refuses every link() with EPERM, as object-storage FUSE mounts do (ossfs, s3fs): a
file system that prepare's check must refuse.

Run one per client (fake host, worker) in its own mount namespace. It runs in the foreground,
writes FILE (when given) once the mount answers, and exits when unmounted (umount -l).
"""

import errno
import os
import sys
import threading
import time

from fusepy import FUSE, FuseOSError, Operations


class Passthrough(Operations):
    def __init__(self, root, no_link=False):
        self.root = os.path.realpath(root)
        self.no_link = no_link

    def _p(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    # -- metadata -------------------------------------------------------------------------

    def access(self, path, mode):
        if not os.access(self._p(path), mode):
            raise FuseOSError(errno.EACCES)

    def getattr(self, path, fh=None):
        try:
            st = os.fstat(self._fd(fh)) if fh is not None else os.lstat(self._p(path))
        except OSError as e:
            raise FuseOSError(e.errno)
        keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size", "st_uid",
                "st_blocks")
        d = {k: getattr(st, k) for k in keys}
        d["st_atime"], d["st_mtime"], d["st_ctime"] = st.st_atime_ns / 1e9, st.st_mtime_ns / 1e9, st.st_ctime_ns / 1e9
        return d

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self._p(path))

    def readlink(self, path):
        return os.readlink(self._p(path))

    def statfs(self, path):
        st = os.statvfs(self._p(path))
        return {k: getattr(st, k) for k in ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail",
                                            "f_ffree", "f_files", "f_flag", "f_frsize", "f_namemax")}

    def chmod(self, path, mode):
        return os.chmod(self._p(path), mode)

    def chown(self, path, uid, gid):
        return os.chown(self._p(path), uid, gid)

    def utimens(self, path, times=None):
        return os.utime(self._p(path), ns=tuple(int(t * 1e9) for t in times) if times else None)

    # -- names: decided by the backing folder (the "server") ---------------------------------

    def mknod(self, path, mode, dev):
        return os.mknod(self._p(path), mode, dev)

    def mkdir(self, path, mode):
        return os.mkdir(self._p(path), mode)

    def rmdir(self, path):
        return os.rmdir(self._p(path))

    def unlink(self, path):
        return os.unlink(self._p(path))

    def symlink(self, target, source):
        return os.symlink(source, self._p(target))

    def rename(self, old, new):
        return os.rename(self._p(old), self._p(new))

    def link(self, target, source):
        if self.no_link:
            raise FuseOSError(errno.EPERM)
        return os.link(self._p(source), self._p(target))

    # -- data (raw_fi: the caller's own open flags reach us, O_EXCL included) --------------

    @staticmethod
    def _fd(fh):
        return fh.fh if hasattr(fh, "fh") else fh

    def open(self, path, fi):
        fi.fh = os.open(self._p(path), fi.flags)
        return 0

    def create(self, path, mode, fi):
        # The caller's flags go to the "server": O_CREAT|O_EXCL fails there when another
        # client created the name, whatever this client's cache believed.
        fi.fh = os.open(self._p(path), fi.flags | os.O_CREAT, mode)
        return 0

    def read(self, path, length, offset, fh):
        return os.pread(self._fd(fh), length, offset)

    def write(self, path, buf, offset, fh):
        return os.pwrite(self._fd(fh), buf, offset)

    def truncate(self, path, length, fh=None):
        if fh is not None:
            os.ftruncate(self._fd(fh), length)
        else:
            os.truncate(self._p(path), length)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        return os.close(self._fd(fh))

    def fsync(self, path, fdatasync, fh):
        return os.fsync(self._fd(fh))

    def fsyncdir(self, path, datasync, fh):
        return 0


def main():
    args = sys.argv[1:]
    no_link = "--no-link" in args
    args = [a for a in args if a != "--no-link"]
    if len(args) < 4 or args[2] != "--cache":
        sys.stderr.write(__doc__)
        return 2
    backing, mountpoint, secs = args[0], args[1], float(args[3])
    ready = args[5] if len(args) >= 6 and args[4] == "--ready" else None
    if ready:
        def announce():
            for _ in range(400):
                if os.path.ismount(mountpoint):
                    with open(ready, "w") as f:
                        f.write("%d\n" % os.getpid())
                    return
                time.sleep(0.025)
        threading.Thread(target=announce, daemon=True).start()
    # ac_attr_timeout=0: every open() compares the file's time with the backing file's and drops
    # cached data that changed, as NFS's close-to-open consistency does. use_ino: the backing
    # inode numbers, so that a client can tell two files apart as it can on NFS.
    FUSE(Passthrough(backing, no_link), mountpoint, raw_fi=True, foreground=True, nothreads=False, allow_other=True,
         attr_timeout=secs, entry_timeout=secs, negative_timeout=secs, ac_attr_timeout=0, auto_cache=True,
         use_ino=True, fsname="cachefs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
