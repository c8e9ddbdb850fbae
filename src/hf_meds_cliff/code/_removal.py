"""Removing a folder a program may have written, without recursion and without raising.

Standard library only: the caller imports it, and the harness loads it by path. A program decides the shape of
what it leaves (a tree thousands of levels deep, names with newlines or bytes that are not UTF-8, folders of
mode ``000`` or without write permission), so the removal walks the tree with one open descriptor at a time
(``openat``/``unlinkat`` relative to it: no path grows with the depth, no descriptor limit is reached, no
Python stack frame is spent per level) and turns every failure into a count.
"""

import os

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_directory(name, dir_fd):
    """A descriptor of the folder ``name`` (relative to ``dir_fd``), made searchable and writable first when
    its mode does not allow this process to enter it."""
    try:
        fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
    except PermissionError:
        os.chmod(name, 0o700, dir_fd=dir_fd)  # never a link: O_NOFOLLOW above would have said ELOOP first
        fd = os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
    try:
        os.chmod(fd, 0o700)  # so that its entries can be removed when it was read-only
    except OSError:
        pass
    return fd


def _remove_files(fd):
    """Unlink every entry of the open folder ``fd`` that is not a folder; return (subfolders, failures)."""
    folders, failures = [], 0
    try:
        entries = list(os.scandir(fd))
    except OSError:
        return folders, 1
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
                continue
            os.unlink(entry.name, dir_fd=fd)
        except FileNotFoundError:
            continue
        except OSError:
            failures += 1
    return folders, failures


def remove_tree(path):
    """Remove ``path`` (a folder, a file or a link) and everything under it; return how many entries could not be
    removed (0 when it is gone). Never raises, never recurses.

    >>> import tempfile
    >>> top = tempfile.mkdtemp()
    >>> os.makedirs(os.path.join(top, "a", "b"))
    >>> remove_tree(top), os.path.exists(top)
    (0, False)
    """
    try:
        return _remove_tree(os.fspath(path))
    except Exception:  # noqa: BLE001 - counted, never raised: a program's leftovers must not crash the checker
        return 1


def _remove_tree(path):
    parent_path, base = os.path.split(os.path.abspath(path))
    try:
        parent = os.open(parent_path or "/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    try:
        try:
            os.unlink(base, dir_fd=parent)
            return 0
        except FileNotFoundError:
            return 0
        except (IsADirectoryError, PermissionError):
            pass  # a folder (Linux says EISDIR; some systems EPERM)
        except OSError:
            return 1
        try:
            fd = _open_directory(base, parent)
        except FileNotFoundError:
            return 0
        except OSError:
            return 1
        failures = 0
        subfolders, failed = _remove_files(fd)
        failures += failed
        frames = [(base, subfolders)]  # (this folder's name in its parent, its subfolders not yet removed)
        while True:
            name, pending = frames[-1]
            if pending:
                child = pending.pop()
                try:
                    child_fd = _open_directory(child, fd)
                except FileNotFoundError:
                    continue
                except OSError:
                    failures += 1
                    continue
                os.close(fd)
                fd = child_fd
                subfolders, failed = _remove_files(fd)
                failures += failed
                frames.append((child, subfolders))
                continue
            frames.pop()
            if not frames:
                break
            try:
                up = os.open("..", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=fd)
            except OSError:
                os.close(fd)
                return failures + 1
            os.close(fd)
            fd = up
            try:
                os.rmdir(name, dir_fd=fd)
            except FileNotFoundError:
                pass
            except OSError:
                failures += 1
        os.close(fd)
        try:
            os.rmdir(base, dir_fd=parent)
        except FileNotFoundError:
            pass
        except OSError:
            failures += 1
        return failures
    finally:
        os.close(parent)
