"""A run's workdir: one path abstraction (local or remote), atomic small files, a lock.

    path = workdir.as_path("gs://bucket/runs/t5")   # or a local path (made absolute)
    with workdir.WorkdirLock(path):                 # process 0; refuses a second run
      workdir.write_text_atomic(path / "config.json", text)

Every read and write of a run's files goes through `etils.epath` (which orbax uses too),
so `gs://` workdirs go to the bucket, not to a local folder named `gs:`. Local paths are
made absolute (orbax needs that); remote ones are left as they are.
"""
from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
import socket
import time
from typing import Any

from etils import epath

LOCK_FILE = "lock"


class WorkdirInUseError(RuntimeError):
  """Another live run holds the workdir's lock."""


def is_remote(path: str | os.PathLike) -> bool:
  """True for URI paths (gs://, s3://, ...): no local filesystem semantics (locks, append)."""
  return "://" in os.fspath(path)


def as_path(path: str | os.PathLike) -> epath.Path:
  """An epath.Path for a workdir: absolute when local, untouched when a URI."""
  if isinstance(path, epath.Path) and is_remote(path):
    return path
  text = os.fspath(path)
  if is_remote(text):
    return epath.Path(text)
  return epath.Path(os.path.abspath(text))


# What epath (fsspec backend) and orbax need for each remote scheme: (module, pip package).
_REMOTE_MODULES = {
    "gs": (("gcsfs", "gcsfs"), ("google.cloud.storage", "google-cloud-storage")),
    "s3": (("s3fs", "s3fs"),),
}


def check_remote_support(path: str | os.PathLike) -> None:
  """Raises a one-line ValueError if `path` is remote and its filesystem is not installed.

  gs:// workdirs need gcsfs (epath's fsspec backend, unless TensorFlow is installed) and
  google-cloud-storage (orbax lists checkpoint steps with it); s3:// needs s3fs.
  """
  import importlib.util  # pylint: disable=g-import-not-at-top
  text = os.fspath(path)
  if not is_remote(text):
    return
  scheme = text.split("://", 1)[0]
  needed = _REMOTE_MODULES.get(scheme)
  if needed is None:
    raise ValueError(f"workdir {text}: unsupported scheme {scheme}://; use a local path, "
                     "gs:// or s3://.")
  missing = []
  for module, package in needed:
    try:
      found = importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
      found = False
    if not found and not (module.endswith("fs") and importlib.util.find_spec("tensorflow")):
      missing.append(package)
  if missing:
    raise ValueError(f"workdir {text} needs {', '.join(missing)}: pip install "
                     f"{' '.join(missing)}")


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` to `path` via a temporary sibling and a rename (readers never see half;
  processes writing the same file at once each rename a whole one)."""
  path = epath.Path(path)
  tmp = path.parent / f".{path.name}.tmp-{socket.gethostname()}-{os.getpid()}"
  tmp.write_bytes(data)
  tmp.replace(path)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
  """`write_bytes_atomic` of `text` in UTF-8."""
  write_bytes_atomic(path, text.encode("utf-8"))


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # exists, owned by someone else
    return True
  return True


class WorkdirLock:
  """Exclusive use of a workdir by one run (take it on process 0 only).

  Local workdirs: an `fcntl.flock` on `<workdir>/lock`, released by the kernel when the
  process dies, so a run killed with SIGKILL never blocks its own resume. The file holds
  the owner's pid and host for the error message.

  Remote workdirs (no locks there; also local filesystems without flock support):
  `<workdir>/lock` holds {host, pid, time}, refreshed by
  `refresh()` (call it at log steps); a lock held by a live pid on this host, or refreshed
  less than `stale_after_s` ago from another host, refuses the run. A lock left by a run
  that died is taken over once stale (or at once on the same host when its pid is gone).

  Raises (on enter):
    WorkdirInUseError: "workdir <path> is in use by pid N on host H ...".
  """

  def __init__(self, workdir: str | os.PathLike, *, stale_after_s: float = 900.0):
    self.workdir = as_path(workdir)
    self.path = self.workdir / LOCK_FILE
    self.stale_after_s = float(stale_after_s)
    self._fd: int | None = None
    self._record_based = False  # remote workdirs, or filesystems without flock
    self._last_refresh = 0.0

  def _record(self) -> str:
    return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()})

  def _refuse(self, owner: dict[str, Any]) -> None:
    raise WorkdirInUseError(
        f"workdir {self.workdir} is in use by pid {owner.get('pid', '?')} on host "
        f"{owner.get('host', '?')}; wait for that run to end (or stop it) before starting "
        "another one here, or use another --workdir.")

  def __enter__(self) -> "WorkdirLock":
    self.workdir.mkdir(parents=True, exist_ok=True)
    if is_remote(self.workdir):
      self._enter_remote()
    else:
      self._enter_local()
    return self

  _NO_LOCKING = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)

  def _enter_local(self) -> None:
    while True:
      fd = os.open(os.fspath(self.path), os.O_RDWR | os.O_CREAT, 0o644)
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except OSError as e:
        if e.errno in self._NO_LOCKING:  # e.g. a network filesystem without flock
          os.close(fd)
          logging.warning("%s does not support file locks; using a lock record instead",
                          self.workdir)
          self._enter_remote()
          return
        if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
          os.close(fd)
          raise
        try:
          owner = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
        except ValueError:
          owner = {}
        os.close(fd)
        self._refuse(owner)
      try:  # the previous owner may have removed the file between our open and flock
        same = os.fstat(fd).st_ino == os.stat(os.fspath(self.path)).st_ino
      except FileNotFoundError:
        same = False
      if same:
        break
      os.close(fd)
    os.ftruncate(fd, 0)
    os.pwrite(fd, self._record().encode(), 0)
    self._fd = fd

  def _enter_remote(self) -> None:
    self._record_based = True
    if self.path.exists():
      try:
        owner = json.loads(self.path.read_text())
      except (ValueError, OSError):
        owner = {}
      same_host = owner.get("host") == socket.gethostname()
      age = time.time() - float(owner.get("time", 0))
      if same_host and isinstance(owner.get("pid"), int) and owner["pid"] != os.getpid():
        if _pid_alive(owner["pid"]):
          self._refuse(owner)
      elif not same_host and age < self.stale_after_s:
        self._refuse(owner)
      logging.warning("taking over the stale lock %s (%s)", self.path, owner)
    self.refresh(force=True)

  def refresh(self, force: bool = False) -> None:
    """Renews a lock record's time (at most once a minute); no-op for fcntl locks."""
    if not self._record_based:
      return
    now = time.time()
    if force or now - self._last_refresh > 60:
      write_text_atomic(self.path, self._record())
      self._last_refresh = now

  def __exit__(self, *exc) -> None:
    if self._fd is not None:
      try:
        os.unlink(os.fspath(self.path))  # while still holding it (see _enter_local)
      except OSError:
        pass
      fcntl.flock(self._fd, fcntl.LOCK_UN)
      os.close(self._fd)
      self._fd = None
    elif self._record_based:
      try:
        self.path.unlink()
      except OSError:
        logging.warning("could not remove the lock %s", self.path)
