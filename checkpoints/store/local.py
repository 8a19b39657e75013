"""Local-folder backend: one file per object under a root folder.

- put: temp file in the same folder, fsync, `os.replace` (readers see the old or the new bytes).
- put_if_absent: temp file, then `os.link(tmp, final)`, which fails when final exists: atomic
  across threads and processes. On Linux the temp file is unnamed (O_TMPFILE, linked through
  /proc/self/fd): no temp name to create and unlink, nothing left behind by a crashed writer.
- put_many_if_absent: every object's unnamed file written, ONE flush of the file system (syncfs)
  for all of them, then each linked into place: no name before its bytes are durable, so a power
  loss leaves each key absent or complete, and a killed process only unnamed files, which the
  kernel drops. One fsync per object cost ~0.4-0.6 ms of CPU each (a batch writes one per document).
- put_if_match / put / delete: hold an exclusive `flock` on the key's lock file across
  read-compare-replace, so compare-and-swap is atomic across processes. Lock files live in one
  hidden folder at the root (`.~locks/`, named by a hash of the key), never beside the objects:
  the folders a person opens (exports, reports) hold only what docmill wrote for them.
- ETag: quoted md5 of the bytes (the same value S3 gives a single-part upload). Each file written
  carries it in an extended attribute (`ETAG_XATTR`) with the file's size and mtime when written, so
  `copy` checks a file is what it was without reading it; a file without the attribute (another
  file system, or a size or mtime that moved: changed in place behind the store's back) is hashed.
Temp files and the lock folder start with `.~` (a prefix `safe_key` refuses) and never show up in `list`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import itertools
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from checkpoints.keys import RESERVED_PREFIX, check_key, check_prefix
from checkpoints.store.base import ObjectStore, etag_of
from docmill.errors import ConfigError, NotFound, PreconditionFailed, StoreError

# Unnamed temp files (Linux O_TMPFILE, linked into place through /proc); off where unsupported.
_ANONYMOUS = hasattr(os, "O_TMPFILE") and os.path.isdir("/proc/self/fd")
LOCK_FOLDER = f"{RESERVED_PREFIX}locks"  # one hidden folder of lock files per store root
_TMP_IDS = itertools.count()  # with the pid, a temp name no other writer uses (O_EXCL checks anyway)


ETAG_XATTR = "user.docmill.etag"  # "<etag> <size> <mtime_ns>" of a file as written


def remember_etag(fd: int, etag: str) -> None:
    """Record a file's ETag on it with its size and mtime now (`ETAG_XATTR`): `recorded_etag` trusts
    it while both are unchanged. Nothing is recorded where the file system has no user attributes."""
    try:
        st = os.fstat(fd)
        os.setxattr(fd, ETAG_XATTR, f"{etag} {st.st_size} {st.st_mtime_ns}".encode())
    except (OSError, AttributeError):  # no user xattrs here (or no os.setxattr): copy reads the bytes
        pass


def recorded_etag(fd: int) -> str | None:
    """The ETag `remember_etag` recorded on an open file, while its size and mtime are still those it
    had then (a write in place moves the mtime); None when there is none or it does not hold."""
    try:
        etag, size, mtime = os.getxattr(fd, ETAG_XATTR).decode().split()
        st = os.fstat(fd)
    except (OSError, AttributeError, ValueError, UnicodeDecodeError):
        return None
    return etag if int(size) == st.st_size and int(mtime) == st.st_mtime_ns else None


class LocalStore(ObjectStore):
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().absolute()
        self.uri = str(self.root)
        self._dirs: set[Path] = set()  # folders this store made or found, so a write skips mkdir
        if self.root.exists() and not self.root.is_dir():
            raise ConfigError(f"store root {self.uri} is a file", hint="point DOCMILL_STORE at a folder")

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def _ensure_dir(self, path: Path) -> None:
        parent = path.parent
        if parent in self._dirs:  # made earlier by this store; a write that finds it gone makes it again
            return
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError) as e:
            raise StoreError(
                f"cannot create folder for {path.relative_to(self.root)}: a parent is an object",
                hint="an object key cannot also be a folder on the local backend; rename one of them",
            ) from e
        self._dirs.add(parent)

    def _open_in_folder(self, path: Path, target: Path, flags: int) -> int:
        """`os.open(target, flags)` for a file in `path`'s folder, making the folder first (and once
        more if it went away under us)."""
        self._ensure_dir(path)
        try:
            return os.open(target, flags, 0o644)
        except FileNotFoundError:
            self._dirs.discard(path.parent)
            self._ensure_dir(path)
            return os.open(target, flags, 0o644)

    def _write_temp(self, path: Path, data: bytes, etag: str) -> Path:
        tmp = _temp_path(path)
        fd = self._open_in_folder(path, tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            _write_all(fd, data, etag)
        except BaseException:
            _unlink(tmp)
            raise
        finally:
            os.close(fd)
        return tmp

    def _write_anonymous(self, path: Path, data: bytes, etag: str, *, sync: bool = True) -> int | None:
        """An unnamed file (O_TMPFILE) in `path`'s folder holding `data`, synced; its descriptor,
        or None where the platform or file system has no unnamed files. Two fewer directory
        operations than a named temp file, and a crashed writer leaves nothing behind."""
        if not _ANONYMOUS:
            return None
        try:
            fd = self._open_in_folder(path, path.parent, os.O_TMPFILE | os.O_WRONLY)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                raise
            _no_anonymous()  # this file system has no unnamed files
            return None
        try:
            _write_all(fd, data, etag, sync=sync)
        except BaseException:
            os.close(fd)
            raise
        return fd

    @contextlib.contextmanager
    def _locked(self, path: Path) -> Iterator[None]:
        self._ensure_dir(path)
        rel = path.relative_to(self.root).as_posix()
        lock = self.root / LOCK_FOLDER / f"{hashlib.sha256(rel.encode('utf-8')).hexdigest()[:40]}.lock"
        fd = self._open_in_folder(lock, lock, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing drops the flock

    def link(self, key: str, *, expires_seconds: int = 7 * 24 * 3600) -> str:
        return self._path(key).as_uri()

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        path = self._path(key)
        try:
            data = path.read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as e:
            raise NotFound(f"no object {key!r} in {self.uri}", key=key) from e
        return data, etag_of(data)

    def put(self, key: str, data: bytes) -> str:
        path, etag = self._path(key), etag_of(data)
        with self._locked(path):
            tmp = self._write_temp(path, data, etag)
            os.replace(tmp, path)
        return etag

    def copy(self, src: str, dst: str, *, etag: str) -> bool:
        """A hard link of `src`'s file at `dst`, the file checked being the one linked (through its
        open descriptor). Safe because no write changes a file in place (put replaces, put_if_absent
        links a new one). Another file system or a sandbox that refuses the link: the bytes are written."""
        path, target = self._path(src), self._path(dst)
        try:
            fd = os.open(path, os.O_RDONLY)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return False
        try:
            data: bytes | None = None
            known = recorded_etag(fd)
            if known is None:
                with os.fdopen(os.dup(fd), "rb") as f:
                    data = f.read()
                known = etag_of(data)
                if known == etag:  # written before files carried their ETag: the next copy reads nothing
                    remember_etag(fd, known)
            if known != etag:
                return False
            with self._locked(target):
                tmp = _temp_path(target)
                try:
                    os.link(f"/proc/self/fd/{fd}", tmp, src_dir_fd=fd, follow_symlinks=True)
                except OSError:  # no /proc, another file system, a sandbox: write the bytes
                    if data is None:
                        with os.fdopen(os.dup(fd), "rb") as f:
                            data = f.read()
                        if etag_of(data) != etag:
                            return False
                    tmp = self._write_temp(target, data, etag)
                os.replace(tmp, target)
        finally:
            os.close(fd)
        return True

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path, etag = self._path(key), etag_of(data)
        fd = self._write_anonymous(path, data, etag)
        if fd is not None:
            try:
                # linkat(AT_SYMLINK_FOLLOW) is needed to follow the /proc link; os.link uses it only
                # when given a dir fd, which linkat ignores for an absolute source path.
                os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=fd, follow_symlinks=True)
                return True
            except FileExistsError:
                return False
            except OSError as e:
                if e.errno == errno.ENOENT and not path.parent.is_dir():
                    self._dirs.discard(path.parent)  # the folder went away: the named path remakes it
                elif e.errno in (errno.EXDEV, errno.EPERM, errno.EACCES, errno.ENOENT, errno.EINVAL):
                    _no_anonymous()  # a sandbox that will not link through /proc
                else:
                    raise
            finally:
                os.close(fd)
        tmp = self._write_temp(path, data, etag)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            _unlink(tmp)
        return True

    def put_many_if_absent(self, items: Sequence[tuple[str, bytes]]) -> list[bool]:
        """One flush for the group (see the module docstring). Where there are no unnamed files, or
        fsync is off (then nothing is flushed anyway), each object is written on its own."""
        paths = [self._path(key) for key, _ in items]
        if not _ANONYMOUS or not _fsync() or len(items) < 2:
            return [self.put_if_absent(key, data) for key, data in items]
        fds: list[int | None] = []
        try:
            for path, (_, data) in zip(paths, items, strict=True):
                fds.append(self._write_anonymous(path, data, etag_of(data), sync=False))
            if any(fd is not None for fd in fds):
                _sync_file_system(self.root)
            out: list[bool] = []
            for (key, data), path, fd in zip(items, paths, fds, strict=True):
                if fd is None:  # unnamed files went away meanwhile: this one the ordinary way
                    out.append(self.put_if_absent(key, data))
                    continue
                try:
                    os.link(f"/proc/self/fd/{fd}", path, src_dir_fd=fd, follow_symlinks=True)
                    out.append(True)
                except FileExistsError:
                    out.append(False)
                except OSError:  # a folder gone, a sandbox refusing the link: the ordinary way
                    out.append(self.put_if_absent(key, data))
            return out
        finally:
            for fd in fds:
                if fd is not None:
                    os.close(fd)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        path = self._path(key)
        with self._locked(path):
            try:
                current = etag_of(path.read_bytes())
            except FileNotFoundError as e:
                raise PreconditionFailed(
                    f"{key!r} is gone; it was deleted since it was read", key=key, hint="read it again"
                ) from e
            if current != etag:
                raise PreconditionFailed(
                    f"{key!r} changed since it was read", key=key, hint="read it again and retry"
                )
            new = etag_of(data)
            tmp = self._write_temp(path, data, new)
            os.replace(tmp, path)
        return new

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def delete(self, key: str) -> None:
        path = self._path(key)
        if not path.is_file():
            return
        with self._locked(path):
            _unlink(path)

    def list(self, prefix: str = "") -> Iterator[str]:
        check_prefix(prefix)
        folder, _, name_prefix = prefix.rpartition("/")
        base = self.root / folder if folder else self.root
        return self._walk(base, f"{folder}/" if folder else "", name_prefix)

    def list_children(self, prefix: str) -> Iterator[str]:
        check_prefix(prefix)
        folder = prefix.rstrip("/")
        base = self.root / folder if folder else self.root
        for name, is_dir in _sorted_entries(base, ""):
            yield f"{name}/" if is_dir else name

    def _walk(self, folder: Path, key_prefix: str, name_prefix: str) -> Iterator[str]:
        """Depth-first, one folder level in memory at a time. Entries sort by `name` for files and
        `name/` for folders, which is exactly the byte order of the full keys (S3's order)."""
        for name, is_dir in _sorted_entries(folder, name_prefix):
            if is_dir:
                yield from self._walk(folder / name, f"{key_prefix}{name}/", "")
            else:
                yield key_prefix + name


def _sorted_entries(folder: Path, name_prefix: str) -> list[tuple[str, bool]]:
    try:
        it = os.scandir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return []
    entries: list[tuple[bytes, bool]] = []
    with it:
        for entry in it:
            name = entry.name
            if name.startswith(RESERVED_PREFIX) or not name.startswith(name_prefix):
                continue
            is_dir = entry.is_dir(follow_symlinks=False)
            if not is_dir and not entry.is_file(follow_symlinks=False):
                continue
            try:
                raw = name.encode("utf-8")
            except UnicodeEncodeError:  # undecodable file name: not one of ours
                continue
            entries.append((raw + b"/" if is_dir else raw, is_dir))
    entries.sort()
    return [((raw[:-1] if is_dir else raw).decode("utf-8"), is_dir) for raw, is_dir in entries]


def _temp_path(path: Path) -> Path:
    """`.~<tag>.<name>` beside `path`; a name too long for that is replaced by its hash."""
    tag = f"tmp.{os.getpid()}.{next(_TMP_IDS)}"
    name = f"{RESERVED_PREFIX}{tag}.{path.name}"
    if len(name.encode("utf-8")) > 255:
        name = f"{RESERVED_PREFIX}{tag}.{hashlib.sha256(path.name.encode('utf-8')).hexdigest()}"
    return path.with_name(name)


def _no_anonymous() -> None:
    """Named temp files from now on (this process)."""
    global _ANONYMOUS
    _ANONYMOUS = False


def _write_all(fd: int, data: bytes, etag: str, *, sync: bool = True) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    remember_etag(fd, etag)  # before the sync: the attribute is as durable as the bytes
    if sync and _fsync():
        os.fsync(fd)


def _sync_file_system(root: Path) -> None:
    """Everything written to the file system holding `root` made durable: syncfs(2) on Linux (one
    journal commit for any number of files written before it), sync(2) where there is none."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if _SYNCFS is None or _SYNCFS(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None, use_errno=True).syncfs  # type: ignore[no-any-return]
    except (OSError, AttributeError):  # no libc symbol (macOS, musl without it)
        return None


_SYNCFS = _load_syncfs()


def _unlink(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _fsync() -> bool:
    from docmill.settings import get_settings

    return get_settings().store_io.fsync
