"""What the config files share: the `arg` parser.

`parse_arg` turns the string after the colon in `--config configs/t5.py:arch=prefix_lm,size=base`
into typed values (big_vision's `parse_arg` idea: the defaults give the types, unknown
keys are errors). The config files are data; the library builds its objects from them and
checks them in lm/config.py (`model_config`, `data_spec`, ...) and lm/validate.py (`validate`).
"""
from __future__ import annotations

from typing import Any

import ml_collections

from lm import cli


_ARG_TYPES = (bool, int, float, str, type(None))


def parse_arg(arg: str | None, **defaults: Any) -> ml_collections.ConfigDict:
  """Parses "key=value,key2=value2,flag" against typed defaults.

  Args:
    arg: the string after ":" in `--config file.py:ARG` (None or "" = all defaults).
      A bare key ("runlocal") means key=True for a boolean key.
    **defaults: every accepted key with its default; the default's type (bool, int,
      float, str; None = str) is the value's type.

  Returns:
    A locked ConfigDict with every key (defaults filled in).

  Raises:
    ValueError: unknown key (listing the known ones), a value of the wrong type, a
      bare non-boolean key, or a key given twice.

  Example:
    >>> parse_arg("arch=prefix_lm,runlocal", arch="encoder_decoder", runlocal=False).arch
    'prefix_lm'
  """
  for key, default in defaults.items():
    if type(default) not in _ARG_TYPES:
      raise TypeError(f"parse_arg: default of {key!r} has unsupported type "
                      f"{type(default).__name__}; use bool, int, float, str or None.")
  values = dict(defaults)
  seen = set()
  for item in (arg or "").split(","):
    item = item.strip()
    if not item:
      continue
    key, sep, text = item.partition("=")
    key = key.strip()
    if key not in defaults:
      raise ValueError(f"unknown config arg {key!r}; expected one of {sorted(defaults)}.")
    if key in seen:
      raise ValueError(f"config arg {key!r} given twice.")
    seen.add(key)
    if not sep:
      if type(defaults[key]) is not bool:
        raise ValueError(f"config arg {key!r} needs a value ({key}=...).")
      values[key] = True
    else:  # a None default takes the text as a string (not a literal as --config.<field>)
      default = "" if defaults[key] is None else defaults[key]
      values[key] = cli.parse_value(text, default, name=f"config arg {key}")
  cfg = ml_collections.ConfigDict(values)
  cfg.lock()
  return cfg
