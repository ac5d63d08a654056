"""SentencePiece tokenizer with T5 conventions, and a command line to train one.

Conventions (seqio `SentencePieceVocabulary`, T5's `cc_all.32000` + 100 extra ids):

  id 0 = <pad>, id 1 = </s> (EOS), id 2 = <unk>; no BOS (Gemma's tokenizer.model, with a
  BOS at 2 and <unk> at 3, is read too: ID_LAYOUTS).
  `extra_ids` sentinels are appended after the SentencePiece pieces in REVERSE order:
  <extra_id_0> = vocab_size - 1, <extra_id_k> = vocab_size - 1 - k.
  vocab_size = pieces in the .model file + extra_ids (32000 + 100 = 32100 for T5).

The model's embedding table has `padded_vocab_size(vocab_size)` rows (a multiple of
128: 32128 for T5); `check_vocab_size` refuses a tokenizer that does not fit a
model's or checkpoint's embedding.

Train one (deterministic, a few seconds for a few thousand pieces):

  python -m lm.data.tokenizer train --output=/tmp/spm.model --vocab_size=8000 [files...]

With no input files it trains on the embedded default corpus (`corpus.py`);
`default_tokenizer` is that tokenizer, trained once and cached (runs that name no tokenizer).

What does not live here: sentinel arithmetic of the objectives (`objectives.py`
uses `vocab_size - 1 - k` directly), reading corpora (`sources.py`).
"""
from __future__ import annotations

import argparse
import hashlib
import io
import logging
import os
import sys
from collections.abc import Iterable, Sequence

import numpy as np
import sentencepiece as spm
from etils import epath
from sentencepiece import sentencepiece_model_pb2

from lm import cli
from lm.data import corpus, features

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
# The (pad, eos, unk, bos) ids a SentencePiece model may have: T5's (no BOS; what
# `train` writes) and Gemma's (T5Gemma's tokenizer.model: a BOS at 2, unk at 3).
ID_LAYOUTS = {"t5": (PAD_ID, EOS_ID, UNK_ID, -1), "gemma": (PAD_ID, EOS_ID, 3, 2)}
DEFAULT_EXTRA_IDS = 100
VOCAB_MULTIPLE = 128


def padded_vocab_size(vocab_size: int, multiple: int = VOCAB_MULTIPLE) -> int:
  """Rounds `vocab_size` up to a multiple of `multiple` (32100 -> 32128).

  The model's embedding (and logits) have this many rows; ids >= vocab_size are
  never produced by the tokenizer.
  """
  if vocab_size <= 0 or multiple <= 0:
    raise ValueError(f"vocab_size and multiple must be positive, got {vocab_size}, {multiple}")
  return features.round_up(vocab_size, multiple)


def check_vocab_size(tokenizer_vocab_size: int, embedding_size: int, *,
                     what: str = "model") -> None:
  """Raises ValueError unless a tokenizer fits an embedding table.

  Accepted: embedding_size == tokenizer_vocab_size, or == its padded size.

  Args:
    tokenizer_vocab_size: `Tokenizer.vocab_size` (pieces + extra ids).
    embedding_size: rows of the model's/checkpoint's token embedding
      (`TransformerConfig.vocab_size`).
    what: names the other side in the message ("model", "checkpoint ...").
  """
  if embedding_size in (tokenizer_vocab_size, padded_vocab_size(tokenizer_vocab_size)):
    return
  raise ValueError(
      f"Tokenizer vocabulary size {tokenizer_vocab_size} (padded "
      f"{padded_vocab_size(tokenizer_vocab_size)}) does not match the {what}'s "
      f"embedding size {embedding_size}; use the tokenizer the {what} was trained with, "
      f"or set model vocab_size={padded_vocab_size(tokenizer_vocab_size)}.")


def _add_extra_ids(model_proto: bytes, extra_ids: int) -> bytes:
  """Appends <extra_id_{n-1}> ... <extra_id_0> as user-defined pieces (seqio)."""
  if extra_ids == 0:
    return model_proto
  proto = sentencepiece_model_pb2.ModelProto.FromString(model_proto)
  existing = {p.piece for p in proto.pieces}
  for k in reversed(range(extra_ids)):
    name = f"<extra_id_{k}>"
    if name in existing:
      raise ValueError(
          f"The SentencePiece model already contains {name}; load it with extra_ids=0.")
    proto.pieces.add(piece=name, score=0.0,
                     type=sentencepiece_model_pb2.ModelProto.SentencePiece.USER_DEFINED)
  return proto.SerializeToString()


class Tokenizer:
  """A SentencePiece model plus T5 sentinels.

  Attributes:
    vocab_size: pieces + extra_ids; sentinel k is `vocab_size - 1 - k`.
    extra_ids: number of sentinels appended.
    pad_id, eos_id, unk_id: 0, 1, 2 (Gemma's layout: unk 3).
    bos_id: None (T5: no BOS), or Gemma's 2 (ID_LAYOUTS).
    model_proto: the serialized SentencePiece model WITHOUT the extra ids (what
      `save` writes); load it again with the same `extra_ids`.
  """

  pad_id = PAD_ID
  eos_id = EOS_ID

  def __init__(self, model_proto: bytes, *, extra_ids: int = DEFAULT_EXTRA_IDS,
               num_threads: int = -1):
    if extra_ids < 0:
      raise ValueError(f"extra_ids must be >= 0, got {extra_ids}")
    self.model_proto = bytes(model_proto)
    self.extra_ids = extra_ids
    self._num_threads = num_threads
    self._sp = spm.SentencePieceProcessor(
        model_proto=_add_extra_ids(self.model_proto, extra_ids), num_threads=num_threads)
    ids = (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id(), self._sp.bos_id())
    if ids not in ID_LAYOUTS.values():
      raise ValueError(
          f"SentencePiece model has (pad, eos, unk, bos) ids {ids}; lm reads T5's "
          f"{ID_LAYOUTS['t5']} or Gemma's {ID_LAYOUTS['gemma']}. Train one with "
          "`python -m lm.data.tokenizer train`.")
    self.unk_id = ids[2]
    self.bos_id = ids[3] if ids[3] >= 0 else None
    self.vocab_size = self._sp.get_piece_size()

  @property
  def sha256(self) -> str:
    """Hex SHA-256 of the SentencePiece model (without the extra ids): the tokenizer's
    identity, recorded in prepared datasets' manifests (lm.data.prepare)."""
    return hashlib.sha256(self.model_proto).hexdigest()

  def __getstate__(self):  # Picklable for multiprocess data loading.
    return {"model_proto": self.model_proto, "extra_ids": self.extra_ids,
            "num_threads": self._num_threads}

  def __setstate__(self, state):
    self.__init__(state["model_proto"], extra_ids=state["extra_ids"],
                  num_threads=state["num_threads"])

  def __repr__(self):
    return f"Tokenizer(vocab_size={self.vocab_size}, extra_ids={self.extra_ids})"

  def sentinel_id(self, k: int) -> int:
    """Returns the id of <extra_id_k> (= vocab_size - 1 - k)."""
    if not 0 <= k < self.extra_ids:
      raise ValueError(f"sentinel {k} out of range [0, {self.extra_ids})")
    return self.vocab_size - 1 - k

  def encode(self, text: str) -> np.ndarray:
    """Encodes one string (no EOS added).

    Returns:
      int32[n] token ids.
    """
    return self._sp.Encode(text, return_type="numpy")

  def encode_batch(self, texts: Sequence[str], num_threads: int | None = None
                   ) -> list[np.ndarray]:
    """Encodes many strings with SentencePiece's own thread pool (GIL released).

    Args:
      texts: strings.
      num_threads: threads; default the constructor's (-1: all cores).

    Returns:
      list of int32[n_i] arrays, one per string.
    """
    if num_threads is None:
      num_threads = self._num_threads
    return self._sp.Encode(list(texts), return_type="numpy", num_threads=num_threads)

  def decode(self, ids: Iterable[int]) -> str:
    """Decodes ids to text; stops at the first EOS, drops padding (seqio).

    Args:
      ids: int[n] token ids (ids >= vocab_size are decoded as <unk>).
    """
    out = []
    for i in np.asarray(ids).reshape(-1).tolist():
      if i == EOS_ID:
        break
      if i == PAD_ID:
        continue
      out.append(i if 0 <= i < self.vocab_size else self.unk_id)
    return self._sp.Decode(out)

  def id_to_piece(self, i: int) -> str:
    return self._sp.id_to_piece(int(i))

  def piece_to_id(self, piece: str) -> int:
    return self._sp.piece_to_id(piece)

  def save(self, path: str) -> None:
    """Writes the SentencePiece model (without extra ids) to `path`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
      f.write(self.model_proto)


class TokenizerFileError(ValueError):
  """A tokenizer file that cannot be used; the message names the file."""


def load_tokenizer(path: str, *, extra_ids: int = DEFAULT_EXTRA_IDS,
                   num_threads: int = -1) -> Tokenizer:
  """Loads a SentencePiece .model file and appends `extra_ids` sentinels.

  Args:
    path: .model file (local or remote: gs://, through etils.epath).
    extra_ids: sentinels to append (0 for a model that already has them, such
      as T5's `cc_all.32000.100extra`).
    num_threads: threads for `encode_batch` (-1: all cores).

  Raises:
    FileNotFoundError: no file at `path`.
    TokenizerFileError: the file is not a usable SentencePiece model (corrupt,
      truncated, another format, or with ids of neither ID_LAYOUTS), naming it.
  """
  file = epath.Path(path)  # local or remote (gs://), as the workdirs
  if not file.exists():
    raise FileNotFoundError(
        f"Tokenizer model {path!r} does not exist; train one with "
        f"`python -m lm.data.tokenizer train --output={path} --vocab_size=8000`.")
  proto = file.read_bytes()
  try:
    return Tokenizer(proto, extra_ids=extra_ids, num_threads=num_threads)
  except ValueError as e:  # our own checks (ids, sentinels): already say what to do
    raise TokenizerFileError(f"tokenizer {path}: {e}") from e
  except Exception as e:  # protobuf DecodeError, SentencePiece's RuntimeError/OSError
    reason = (str(e).strip().splitlines() or [""])[0][:200]
    raise TokenizerFileError(
        f"tokenizer file {path} is not a valid SentencePiece model ({type(e).__name__}: "
        f"{reason}); it is corrupt or of another format: replace it, or train one with "
        f"`python -m lm.data.tokenizer train --output={path}`.") from e


def _training_lines(documents: Iterable[str], max_chars: int) -> Iterable[str]:
  """Yields the non-empty lines of the documents, split to at most max_chars."""
  for doc in documents:
    for line in doc.splitlines():
      line = line.strip()
      while line:
        yield line[:max_chars]
        line = line[max_chars:]


def train_tokenizer(documents: Iterable[str], *, vocab_size: int,
                    model_type: str = "unigram", extra_ids: int = DEFAULT_EXTRA_IDS,
                    character_coverage: float = 0.9995, byte_fallback: bool = False,
                    max_sentences: int = 2_000_000, seed: int = 0, num_threads: int = 1,
                    output: str | None = None) -> Tokenizer:
  """Trains a SentencePiece model with T5 special ids on documents.

  Deterministic: SentencePiece's random generator is seeded with `seed`, input
  order is kept. The model depends on `num_threads` (SentencePiece splits the
  work by thread), so the same inputs, seed and num_threads give a byte-identical
  file; keep the default 1 for models others must reproduce.

  Args:
    documents: iterable of strings; each line of each string is one training
      sentence (lines over 8192 characters are cut).
    vocab_size: pieces in the .model file (the Tokenizer's vocab_size is this
      plus extra_ids).
    model_type: "unigram" (T5) or "bpe".
    extra_ids: sentinels appended at load time.
    character_coverage: share of characters covered by pieces (rest -> <unk>, or
      bytes if byte_fallback).
    byte_fallback: encode unknown characters as UTF-8 byte pieces.
    max_sentences: at most this many lines are used (the first ones).
    seed: SentencePiece's random seed.
    num_threads: training threads.
    output: if given, the .model file is written there.

  Returns:
    the trained Tokenizer.
  """
  if model_type not in ("unigram", "bpe"):
    raise ValueError(f"model_type must be 'unigram' or 'bpe', got {model_type!r}")
  if vocab_size < 8:
    raise ValueError(f"vocab_size must be >= 8, got {vocab_size}")
  lines = []
  for line in _training_lines(documents, 8192):
    lines.append(line)
    if len(lines) >= max_sentences:
      break
  if not lines:
    raise ValueError("Tokenizer training corpus is empty (no non-blank lines); "
                     "pass text files, or none to use the default corpus.")
  spm.set_random_generator_seed(seed)
  model = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
        model_type=model_type, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        character_coverage=character_coverage, byte_fallback=byte_fallback,
        input_sentence_size=0, shuffle_input_sentence=False, num_threads=num_threads,
        max_sentence_length=8192 * 4, minloglevel=2)
  except RuntimeError as e:
    raise ValueError(f"SentencePiece training failed ({e}); with a small corpus, "
                     f"lower --vocab_size (was {vocab_size}).") from e
  tokenizer = Tokenizer(model.getvalue(), extra_ids=extra_ids)
  if output:
    tokenizer.save(output)
  return tokenizer


def read_text_files(paths: Sequence[str]) -> Iterable[str]:
  """Yields the contents of text files (globs allowed), decoding with replacement."""
  import glob  # pylint: disable=g-import-not-at-top
  for pattern in paths:
    files = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
    if not files or not all(os.path.isfile(f) for f in files):
      raise FileNotFoundError(f"No input file matches {pattern!r}.")
    for name in files:
      with open(name, "rb") as f:
        yield f.read().decode("utf-8", errors="replace")


def default_tokenizer(vocab_size: int = 8000, *, extra_ids: int = DEFAULT_EXTRA_IDS) -> Tokenizer:
  """A unigram tokenizer trained on the default corpus, cached under the lm cache dir.

  The tokenizer of a run whose config names none (`DataSpec.tokenizer=None`). A damaged cache
  entry is rebuilt (with a warning).
  """
  path = os.path.join(corpus.cache_dir(), "tokenizers", f"stdlib-docs-unigram-{vocab_size}.model")
  if os.path.exists(path):
    try:
      return load_tokenizer(path, extra_ids=extra_ids)
    except TokenizerFileError as e:  # a damaged cache entry: rebuild it
      logging.warning("%s; rebuilding the cached tokenizer.", e)
  try:
    tok = train_tokenizer(corpus.default_corpus(), vocab_size=vocab_size, extra_ids=extra_ids)
  except ValueError as e:  # e.g. T5's 32000 pieces: more than the default corpus holds
    n = min(vocab_size // 2, 8000)
    raise ValueError(
        f"the default corpus cannot train a {vocab_size}-piece tokenizer "
        f"({e.__cause__ or e}); point "
        f"--config.data.tokenizer at a SentencePiece model (T5's at paper scale), or train a "
        f"smaller one on the fly: --config.data.default_vocab_size={n} "
        f"--config.model.vocab_size={padded_vocab_size(n + extra_ids)}") from e
  try:
    tmp = f"{path}.{os.getpid()}.tmp"
    tok.save(tmp)
    os.replace(tmp, path)
  except OSError:
    pass
  return tok


def run_tokenizer(path: str | None, *, default_vocab_size: int, extra_ids: int) -> Tokenizer:
  """The tokenizer of a run: the SentencePiece model at `path` (config.data.tokenizer), or, when
  there is none, `default_tokenizer(default_vocab_size)`; both with `extra_ids` sentinels.

  The one place this choice is made: the data pipeline and lm.restore both call it.
  """
  if path:
    return load_tokenizer(path, extra_ids=extra_ids)
  return default_tokenizer(default_vocab_size, extra_ids=extra_ids)


def main(argv: Sequence[str] | None = None) -> int:
  """Command line: `python -m lm.data.tokenizer train --output=... --vocab_size=...`."""
  parser = argparse.ArgumentParser(
      prog="python -m lm.data.tokenizer",
      description="Train or inspect a SentencePiece tokenizer with T5 conventions "
                  "(pad 0, eos 1, unk 2, no bos; extra_ids sentinels at the top).")
  sub = parser.add_subparsers(dest="command", required=True)
  train = sub.add_parser(
      "train", help="train a .model file",
      description="Train a SentencePiece model deterministically. Each line of the input "
                  "files is a training sentence. With no inputs, trains on the embedded "
                  "default corpus (Python standard-library docstrings).")
  train.add_argument("inputs", nargs="*", help="text files or globs (default: embedded corpus)")
  train.add_argument("--output", required=True, help="path of the .model file to write")
  train.add_argument("--vocab_size", type=int, required=True,
                     help="pieces in the model, without extra ids (T5: 32000)")
  train.add_argument("--model_type", choices=("unigram", "bpe"), default="unigram")
  train.add_argument("--extra_ids", type=int, default=DEFAULT_EXTRA_IDS,
                     help="sentinels appended when loaded (reported here; default 100)")
  train.add_argument("--character_coverage", type=float, default=0.9995)
  train.add_argument("--byte_fallback", action="store_true")
  train.add_argument("--max_sentences", type=int, default=2_000_000)
  train.add_argument("--seed", type=int, default=0)
  train.add_argument("--num_threads", type=int, default=1)
  info = sub.add_parser("info", help="print a model's sizes and special ids")
  info.add_argument("model")
  info.add_argument("--extra_ids", type=int, default=DEFAULT_EXTRA_IDS)
  args = parser.parse_args(argv)

  if args.command == "info":
    tok = load_tokenizer(args.model, extra_ids=args.extra_ids)
  else:
    if args.inputs:
      documents = read_text_files(args.inputs)
    else:
      documents = corpus.default_corpus()
    try:
      tok = train_tokenizer(
          documents, vocab_size=args.vocab_size, model_type=args.model_type,
          extra_ids=args.extra_ids, character_coverage=args.character_coverage,
          byte_fallback=args.byte_fallback, max_sentences=args.max_sentences,
          seed=args.seed, num_threads=args.num_threads, output=args.output)
    except cli.BAD_INPUT_ERRORS as e:
      return cli.bad_input_exit(e)
    print(f"wrote {args.output}")
  print(f"vocab_size={tok.vocab_size} (pieces={tok.vocab_size - tok.extra_ids}, "
        f"extra_ids={tok.extra_ids}), embedding size={padded_vocab_size(tok.vocab_size)}, "
        f"pad={tok.pad_id} eos={tok.eos_id} unk={tok.unk_id}, "
        f"<extra_id_0>={tok.vocab_size - 1 if tok.extra_ids else None}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
