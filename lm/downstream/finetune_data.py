"""Fine-tuning batches from downstream tasks: text-to-text examples -> packed feature rows.

    spec = FinetuneSpec(tasks=(("glue_cola", 1.0),), data_dir="data/", architecture=
                        "encoder_decoder", inputs_length=512, targets_length=114,
                        batch_size=128)
    data = FinetuneData(spec, tokenizer=tok, process_index=0, process_count=1)
    it = data.train_iterator()      # next / get_state / set_state / close / packing_efficiency
    merged = data.merge_states([it.get_state(), ...])   # every process's: save this one
    for batch in data.eval_iterator(num_batches=None): ...   # validation rows, unpacked

The same contract as lm/data/pipeline.py's DataPipeline / lm/data/shards.py's TrainIterator,
so the trainer checkpoints the data position and resumes exactly. The steps per virtual
shard (shuffle, mix by rates, tokenize, convert, pack, batch): docs/finetuning.md, 'Data'.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grain
import numpy as np
from grain import experimental as grain_experimental

from lm.data import converters, features, packing, shards
from lm.downstream import task as task_lib

STATE_KIND = "finetune"
STATE_VERSION = 1


@dataclasses.dataclass(frozen=True)
class FinetuneSpec:
  """What the fine-tuning data reads and produces.

  Attributes:
    tasks: ((task name, rate), ...): the training mixture; a task with rate 0 is not
      trained on (it may still be evaluated). One task: ((name, 1.0),).
    data_dir: where the tasks' files are (Task.load).
    split: the split trained on.
    architecture: "encoder_decoder", "prefix_lm" or "causal".
    inputs_length, targets_length: feature lengths (decoder-only rows are their sum).
    batch_size: GLOBAL rows per batch; eval_batch_size: global eval rows (default batch_size).
    num_shards: virtual data shards (must divide batch_size; a multiple of the process count).
    pack: pack several examples per row (T5's fine-tuning) or pad one per row.
    num_packing_bins: rows each shard's packer fills at once (default max(rows, 16)).
    loss_on_inputs: decoder-only: loss on the inputs part too (default: targets only).
    seed: shuffling seed.
    framing: how inputs are framed and the decoder starts (converters.Framing: T5's, or
      the checkpoint's that the run starts from, e.g. T5Gemma's).
  """
  tasks: tuple[tuple[str, float], ...]
  data_dir: str | None = None
  split: str = "train"
  architecture: str = "encoder_decoder"
  inputs_length: int = 512
  targets_length: int = 114
  batch_size: int = 128
  eval_batch_size: int | None = None
  num_shards: int = shards.DEFAULT_NUM_SHARDS
  pack: bool = True
  num_packing_bins: int | None = None
  loss_on_inputs: bool = False
  seed: int = 0
  framing: converters.Framing = converters.T5_FRAMING

  def __post_init__(self):
    tasks = tuple((str(n), float(r)) for n, r in self.tasks)
    object.__setattr__(self, "tasks", tasks)
    if not tasks:
      raise ValueError("FinetuneSpec.tasks is empty; expected at least one (task, rate).")
    if any(r < 0 for _, r in tasks) or sum(r for _, r in tasks) <= 0:
      raise ValueError(f"FinetuneSpec.tasks rates {[r for _, r in tasks]} must be "
                       "non-negative with a positive sum.")
    if self.architecture not in packing.ARCHITECTURES:
      raise ValueError(f"unknown architecture {self.architecture!r}; expected one of "
                       f"{list(packing.ARCHITECTURES)}.")
    for name in ("inputs_length", "targets_length", "batch_size", "num_shards"):
      if getattr(self, name) <= 0:
        raise ValueError(f"FinetuneSpec.{name} must be positive, got {getattr(self, name)}.")
    for name in ("batch_size", "eval_batch_size"):
      b = getattr(self, name)
      if b is not None and b % self.num_shards:
        raise ValueError(f"FinetuneSpec.{name}={b} is not divisible by num_shards="
                         f"{self.num_shards}; set num_shards to a divisor of it.")

  @property
  def global_eval_batch_size(self) -> int:
    """Global rows per eval batch: eval_batch_size, else batch_size."""
    return self.eval_batch_size or self.batch_size

  def fingerprint(self) -> str:
    """Digest of the fields that decide which batches are produced."""
    d = {k: v for k, v in dataclasses.asdict(self).items() if k != "eval_batch_size"}
    if self.framing == converters.T5_FRAMING:
      del d["framing"]  # as before the field existed: saved data positions still resume
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _seed(*words: int) -> int:
  """A 32-bit seed from integers (stable across processes and Python versions)."""
  h = hashlib.sha256(json.dumps([int(w) for w in words]).encode()).digest()
  return int.from_bytes(h[:4], "little")


class _Convert:
  """{"inputs", "targets"} text -> converted features (tokenize, EOS, trim, layout)."""

  def __init__(self, tokenizer, spec: FinetuneSpec):
    self.tokenizer = tokenizer
    self.architecture = spec.architecture
    self.lengths = {"inputs": spec.inputs_length, "targets": spec.targets_length}
    self.loss_on_inputs = spec.loss_on_inputs
    self.framing = spec.framing

  def __call__(self, example: Mapping[str, str]) -> dict[str, np.ndarray]:
    ids = {"inputs": self.tokenizer.encode(example["inputs"]).astype(np.int32),
           "targets": self.tokenizer.encode(example["targets"]).astype(np.int32)}
    return converters.convert(ids, self.architecture, lengths=self.lengths,
                              loss_on_inputs=self.loss_on_inputs, framing=self.framing)


class FinetuneIterator(Iterator[dict]):
  """This process's fine-tuning batches (same interface as shards.TrainIterator).

  Attributes:
    shards: the virtual shards this process owns (range).
    packing_efficiency: non-padding share of the last batch.
    batches: batches produced since the start (restored by set_state).
  """

  def __init__(self, shard_iterators: Mapping[int, Any], *, fingerprint: str,
               num_shards: int):
    self._its = dict(shard_iterators)
    self.shards = range(min(self._its), max(self._its) + 1)
    self._fingerprint = fingerprint
    self._num_shards = num_shards
    self.packing_efficiency = float("nan")
    self.batches = 0

  def __next__(self) -> dict[str, np.ndarray]:
    parts = [next(self._its[k]) for k in self.shards]
    batch = {key: np.concatenate([p[key] for p in parts]) for key in parts[0]}
    self.batches += 1
    self.packing_efficiency = packing.packing_efficiency(batch)
    return batch

  def get_state(self) -> dict[str, Any]:
    """A JSON-serialisable dict: this process's shards' positions (see merge_states)."""
    return {"kind": STATE_KIND, "version": STATE_VERSION, "fingerprint": self._fingerprint,
            "num_shards": self._num_shards, "batches": self.batches,
            "shards": {str(k): _json_normal(self._its[k].get_state()) for k in self.shards}}

  def set_state(self, state: Mapping[str, Any]) -> None:
    """Restores get_state() of this process or merge_states() of all processes.

    Raises:
      ValueError: a state of another kind, version, spec or shard count, or one that
        lacks a shard this process owns.
    """
    _check_header(state, self._fingerprint, self._num_shards)
    missing = [k for k in self.shards if str(k) not in state["shards"]]
    if missing:
      raise ValueError(f"fine-tuning data state has no position for virtual shard(s) "
                       f"{missing}; pass merge_states() of every process's get_state().")
    for k in self.shards:
      self._its[k].set_state(state["shards"][str(k)])
    self.batches = int(state["batches"])

  def close(self) -> None:
    """Drops the shard iterators (idempotent)."""
    self._its = {k: iter(()) for k in self._its}


def _json_normal(state: Any) -> Any:
  """grain states hold tuples and numpy scalars; JSON round trip them to plain lists."""
  return json.loads(json.dumps(state, default=lambda x: x.item() if hasattr(x, "item")
                               else list(x)))


def _check_header(state: Mapping[str, Any], fingerprint: str | None,
                  num_shards: int | None) -> None:
  if not isinstance(state, Mapping) or state.get("kind") != STATE_KIND:
    raise ValueError("the saved data state is not a fine-tuning data state (it was saved by "
                     "a pre-training run?); start the fine-tuning run in a new workdir.")
  if state.get("version") != STATE_VERSION:
    raise ValueError(f"fine-tuning data state version {state.get('version')} is not "
                     f"{STATE_VERSION}; start the data from scratch.")
  if num_shards is not None and state["num_shards"] != num_shards:
    raise ValueError(f"fine-tuning data state has {state['num_shards']} virtual shards, this "
                     f"run {num_shards}; restore with the same data.num_shards.")
  if fingerprint is not None and state["fingerprint"] != fingerprint:
    raise ValueError("fine-tuning data state was saved with other tasks, rates, lengths or "
                     f"seed (fingerprint {state['fingerprint']} != {fingerprint}); restore "
                     "with the same config.")


class FinetuneData:
  """The tasks' examples, the tokenizer and the iterator factories for one process.

  Args:
    spec: FinetuneSpec.
    tokenizer: lm.data.tokenizer.Tokenizer (the model's).
    process_index, process_count: this process (owns virtual shards
      [index * S / count, (index + 1) * S / count)).

  Raises:
    ValueError: an unknown task or split (the task registry's message), a task with
      fewer training examples than virtual shards.
  """

  def __init__(self, spec: FinetuneSpec, *, tokenizer, process_index: int = 0,
               process_count: int = 1):
    if not 0 <= process_index < process_count:
      raise ValueError(f"process_index {process_index} not in [0, {process_count}).")
    if spec.num_shards % process_count:
      raise ValueError(f"num_shards={spec.num_shards} is not divisible by process_count="
                       f"{process_count}; set data.num_shards to a multiple of it.")
    bos = spec.framing.prompt_bos
    if bos is not None and getattr(tokenizer, "bos_id", None) != bos:
      raise ValueError(f"the framing puts <bos> {bos} before every input but the tokenizer's "
                       f"BOS is {getattr(tokenizer, 'bos_id', None)}; set data.tokenizer to "
                       "the checkpoint's tokenizer.model.")
    self.spec = spec
    self.tokenizer = tokenizer
    self.num_shards = spec.num_shards
    per_process = spec.num_shards // process_count
    self.process_index, self.process_count = process_index, process_count
    self.shards = range(process_index * per_process, (process_index + 1) * per_process)
    self.rows_per_shard = spec.batch_size // spec.num_shards
    self.batch_size = self.rows_per_shard * per_process
    self.lengths = packing.feature_lengths(spec.architecture, spec.inputs_length,
                                           spec.targets_length)
    self._keys = features.feature_keys(spec.architecture)
    self._convert = _Convert(tokenizer, spec)
    self.tasks = [(task_lib.get_task(name), rate) for name, rate in spec.tasks]
    self.train_examples: dict[str, list[dict[str, str]]] = {}
    for task, rate in self.tasks:
      if rate <= 0:
        continue
      rows = [{"inputs": ex["inputs"], "targets": ex["targets"]}
              for ex in task.examples(spec.split, spec.data_dir)]
      if len(rows) < spec.num_shards:
        raise ValueError(f"task {task.name!r} split {spec.split!r} has {len(rows)} examples, "
                         f"fewer than data.num_shards={spec.num_shards}; lower num_shards.")
      self.train_examples[task.name] = rows

  # -- the contract of lm.data.shards.merge_states, for this state kind ----------------
  @staticmethod
  def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Merges every process's `get_state()` into one restorable state (all shards).

    Raises:
      ValueError: no states, states of other specs or of different positions.
    """
    if not states:
      raise ValueError("merge_states needs at least one iterator state.")
    first = states[0]
    _check_header(first, None, None)
    shards: dict[str, Any] = {}
    for state in states:
      _check_header(state, first["fingerprint"], first["num_shards"])
      if state["batches"] != first["batches"]:
        raise ValueError(f"cannot merge fine-tuning data states at different positions "
                         f"({state['batches']} != {first['batches']} batches).")
      shards.update(state["shards"])
    return {**{k: first[k] for k in ("kind", "version", "fingerprint", "num_shards",
                                     "batches")},
            "shards": dict(sorted(shards.items(), key=lambda kv: int(kv[0])))}

  def _shard_rows(self, k: int) -> grain.IterDataset:
    spec = self.spec
    streams, rates = [], []
    for j, (task, rate) in enumerate(self.tasks):
      if rate <= 0:
        continue
      ds = grain.MapDataset.source(self.train_examples[task.name])[k::self.num_shards]
      streams.append(ds.shuffle(seed=_seed(spec.seed, k, j)).repeat(None))
      rates.append(rate)
    ds = streams[0] if len(streams) == 1 else grain.MapDataset.mix(streams, rates)
    it = ds.map(self._convert).to_iter_dataset(
        grain.ReadOptions(num_threads=0, prefetch_buffer_size=0))
    if not spec.pack:
      return it.map(lambda ex: packing.pad_example(ex, self.lengths))
    length_struct = {key: self.lengths[packing.stack_of(key)] for key in self._keys}
    packed = grain_experimental.FirstFitPackIterDataset(
        it, length_struct=length_struct,
        num_packing_bins=spec.num_packing_bins or max(self.rows_per_shard, 16),
        shuffle_bins=False)
    return packed.map(packing.rename_packed)

  def train_iterator(self) -> FinetuneIterator:
    """This process's infinite training iterator."""
    its = {k: iter(self._shard_rows(k).batch(self.rows_per_shard, drop_remainder=True))
           for k in self.shards}
    return FinetuneIterator(its, fingerprint=self.spec.fingerprint(),
                            num_shards=self.num_shards)

  def eval_iterator(self, num_batches: int | None = None) -> Iterator[dict[str, np.ndarray]]:
    """Teacher-forced validation batches: every trained task's validation examples in
    order, one per row (unpacked), all-zero rows after the end (loss weight 0).

    Global batch b holds rows [b * E, (b + 1) * E) (E = eval_batch_size); this process
    yields its slice of it, so the processes' batches make up the same global batches.
    """
    spec = self.spec
    rows = []
    for task, rate in self.tasks:
      if rate > 0:
        rows += [packing.pad_example(self._convert(ex), self.lengths)
                 for ex in task.examples("validation", spec.data_dir)]
    if not rows:
      raise ValueError("no validation examples in the fine-tuning tasks.")
    global_rows = spec.global_eval_batch_size
    per_process = global_rows // self.process_count
    total = num_batches or -(-len(rows) // global_rows)
    zeros = {k: np.zeros_like(v) for k, v in rows[0].items()}
    for b in range(total):
      lo = b * global_rows + self.process_index * per_process
      part = rows[lo:lo + per_process]
      part = part + [zeros] * (per_process - len(part))
      yield {k: np.stack([r[k] for r in part]) for k in rows[0]}
