"""Whole-or-nothing file writes for the Python tools, as the C++ side does them
(core/files.h, write_file_atomic): the bytes go to a temporary file beside the
target, are synced, and the temporary is renamed over the target, so a reader
sees the old file or the new one, never a part; on any failure the temporary is
removed and an earlier file is left as it was.

    from atomic_write import check_output_dir, write_atomic
    check_output_dir(path, "--out")   # before the work: the folder exists and is writable
    write_atomic(path, data)          # data: bytes or str
"""

import os
import tempfile


def check_output_dir(path, what):
    """Raises ValueError naming `what` unless `path`'s folder exists and is writable, and `path`
    is not a folder: called before any work, so that a bad output path costs nothing."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError("%s %s: the folder %s does not exist" % (what, path, folder))
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError("%s %s: the folder %s is not writable" % (what, path, folder))
    if os.path.isdir(path):
        raise ValueError("%s %s: is a folder" % (what, path))


def write_atomic(path, data):
    """Replaces `path` by `data` (bytes, or str written as UTF-8) atomically."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    except OSError:
        pass  # file systems that cannot sync a folder
    finally:
        os.close(dfd)
