"""An offline stand-in for Google Cloud Storage: `gs://bucket/...` kept under a local root.

    with fake_gcs.installed(tmp_path / "bucket_root"):
      train.train_and_evaluate(lm.validate.validate(config), "gs://bucket/run")

Four things reach GCS in a run, and each is pointed at `root`:
  etils.epath (lm's files, orbax's metadata): a gcsfs-like fsspec filesystem registered
    for the `gs`/`gcs` protocols. Like gcsfs it names objects "bucket/path" and is used
    through epath's fsspec backend, so lm code that bypassed epath (plain `open`,
    `os.path`) would write a local "gs:" folder instead, which the tests check for;
  tensorstore (orbax's array data): orbax's GCS kvstore spec is replaced by the file
    driver on the same root;
  orbax's hierarchical-namespace probe (a google-cloud-storage client call): answered
    "not enabled";
  ArrayRecord's C++ reader of prepared datasets (its own GCS client,
    `lm.data.prepared.reader_path`): given the local file under `root`.
lm's start-up check for gcsfs / google-cloud-storage (lm/workdir.py) is told that the
fake provides them.
"""
from __future__ import annotations

import contextlib
import os
from unittest import mock

import fsspec
from fsspec.implementations.local import LocalFileSystem


def _make_fs_class(root: str):
  root = os.path.abspath(root).rstrip("/")

  class FakeGcsFileSystem(LocalFileSystem):
    protocol = ("gs", "gcs")
    root_marker = ""
    calls = 0

    def __init__(self, *args, **kwargs):
      kwargs.pop("finalize_on_close", None)
      super().__init__(*args, **kwargs)

    @classmethod
    def _strip_protocol(cls, path):
      path = os.fspath(path)
      for prefix in ("gs://", "gcs://"):
        if path.startswith(prefix):
          path = path[len(prefix):]
      if path.startswith(root + "/") or path == root:
        return path.rstrip("/") or root
      FakeGcsFileSystem.calls += 1
      return f"{root}/{path.lstrip('/')}".rstrip("/")

    @staticmethod
    def _to_object_name(local):
      return local[len(root) + 1:] if local.startswith(root + "/") else local

    def ls(self, path, detail=False, **kwargs):
      out = super().ls(path, detail=detail, **kwargs)
      if detail:
        return [{**o, "name": self._to_object_name(o["name"])} for o in out]
      return [self._to_object_name(o) for o in out]

    def info(self, path, **kwargs):
      out = super().info(path, **kwargs)
      return {**out, "name": self._to_object_name(out["name"])}

    def glob(self, path, **kwargs):
      local = LocalFileSystem().glob(self._strip_protocol(path), **kwargs)
      return [self._to_object_name(p) for p in local]

    def open(self, path, mode="rb", **kwargs):
      if "a" in mode:  # object stores cannot append
        raise NotImplementedError(f"append mode on {path}: not supported by GCS")
      return super().open(path, mode=mode, **kwargs)

  return FakeGcsFileSystem


@contextlib.contextmanager
def installed(root: str | os.PathLike):
  """Routes gs:// (epath, orbax, tensorstore) to `root` inside the context."""
  from etils.epath import backend
  from orbax.checkpoint._src.path import gcs_utils

  from lm import workdir
  from lm.data import prepared

  root = os.fspath(root)
  os.makedirs(root, exist_ok=True)
  fs_class = _make_fs_class(root)
  previous = {p: fsspec.registry.get(p) for p in ("gs", "gcs")}
  for p in ("gs", "gcs"):
    fsspec.register_implementation(p, fs_class, clobber=True)
  backend.fsspec_backend._get_filesystem.cache_clear()  # pylint: disable=protected-access

  def kvstore(path):
    bucket_and_path = os.fspath(path).split("://", 1)[-1]
    return {"driver": "file", "path": f"{os.path.abspath(root)}/{bucket_and_path}"}

  def reader_path(path):
    text = os.fspath(path)
    if text.startswith(("gs://", "gcs://")):
      return f"{os.path.abspath(root)}/{text.split('://', 1)[1]}"
    return text

  try:
    with mock.patch.object(gcs_utils, "get_kvstore_for_gcs", kvstore), \
         mock.patch.object(prepared, "reader_path", reader_path), \
         mock.patch.object(gcs_utils, "is_hierarchical_namespace_enabled", lambda p: False), \
         mock.patch.dict(workdir._REMOTE_MODULES, {"gs": ()}):  # pylint: disable=protected-access
      yield fs_class
  finally:
    for p, cls in previous.items():
      if cls is None:
        fsspec.registry.pop(p, None) if hasattr(fsspec.registry, "pop") else None
      else:
        fsspec.register_implementation(p, cls, clobber=True)
    backend.fsspec_backend._get_filesystem.cache_clear()  # pylint: disable=protected-access
