"""configs/common.py parse_arg, lm/config.py validate and builders, configs/t5.py (no training)."""
import dataclasses
import json

import jax
import pytest

from configs import common, t5
from lm import config as config_lib
from lm import partitioning
from lm.validate import validate


def _t5(arg=None):
  """configs/t5.py's config for `arg`, derived (as lm.main has it)."""
  return config_lib.derive(t5.get_config(arg))


def test_parse_arg_types_bare_flags_and_errors():
  arg = common.parse_arg("arch=prefix_lm,steps=10,noise=0.25,runlocal", arch="encoder_decoder",
                         steps=-1, noise=-1.0, runlocal=False, name=None)
  assert (arg.arch, arg.steps, arg.noise, arg.runlocal, arg.name) == ("prefix_lm", 10, 0.25,
                                                                      True, None)
  assert common.parse_arg("runlocal=False", runlocal=True).runlocal is False
  assert common.parse_arg(None, size="base").size == "base"
  with pytest.raises(ValueError, match="unknown config arg 'sise'; expected one of \\[.*'size'"):
    common.parse_arg("sise=base", size="base")
  with pytest.raises(ValueError, match="steps='ten': expected an int"):
    common.parse_arg("steps=ten", steps=1)
  with pytest.raises(ValueError, match="expected a boolean"):
    common.parse_arg("runlocal=maybe", runlocal=False)
  with pytest.raises(ValueError, match="needs a value"):
    common.parse_arg("steps", steps=1)
  with pytest.raises(ValueError, match="given twice"):
    common.parse_arg("steps=1,steps=2", steps=1)


@pytest.mark.parametrize("arg, preset, mask_type, shared, targets_length", [
    ("", "t5_1_1/base/encoder_decoder", "encoder_decoder", False, 114),
    ("runlocal", "cpu/tiny/encoder_decoder", "encoder_decoder", False, 14),
    ("arch=shared,family=t5_1_0,objective=iid_replace_spans", "t5_1_0/base/shared",
     "encoder_decoder", True, 188),
    ("arch=prefix_lm,size=small", "t5_1_1/small/prefix_lm", "prefix_lm", False, 114),
    ("arch=causal,objective=full_lm,runlocal", "cpu/tiny/causal", "causal", False, 64),
    ("arch=causal,size=xl", "t5_1_1/xl/causal", "causal", False, 114),
    ("objective=span_corruption,noise=0.5,span=10", "t5_1_1/base/encoder_decoder",
     "encoder_decoder", False, None),
    ("objective=ul2,size=large", "t5_1_1/large/encoder_decoder", "encoder_decoder", False, None),
])
def test_presets_validate(arg, preset, mask_type, shared, targets_length):
  config = config_lib.derive(t5.get_config(arg))
  validate(config, num_devices=jax.device_count())
  assert config_lib.preset_name(config) == preset
  if targets_length is not None:
    assert config.data.targets_length == targets_length
  model = config_lib.model_config(config)
  assert model.vocab_size == config.model.vocab_size
  assert (model.mask_type, model.shared_encoder_decoder) == (mask_type, shared)
  spec = config_lib.data_spec(config)
  assert spec.architecture == mask_type  # the layout is derived from config.model.architecture
  assert spec.objective == config.data.objective


def test_architecture_is_one_config_field():
  """config.model.architecture owns the architecture: no mask_type / data.architecture
  fields to disagree with it, and changing it changes the model and the data layout."""
  config = config_lib.derive(t5.get_config("runlocal"))
  for field in ("mask_type", "shared_encoder_decoder", "num_encoder_layers",
                "num_decoder_layers", "preset"):
    assert field not in config.model
  assert "architecture" not in config.data
  config.model.architecture = "prefix_lm"
  model = config_lib.model_config(config)
  assert (model.mask_type, model.num_encoder_layers, model.num_decoder_layers) == (
      "prefix_lm", 0, 2)
  assert config_lib.data_spec(config).architecture == "prefix_lm"
  config.model.architecture = "shared"
  model = config_lib.model_config(config)
  assert model.shared_encoder_decoder and model.num_encoder_layers == 2
  assert config_lib.data_spec(config).architecture == "encoder_decoder"
  config.model.architecture = "rnn"
  with pytest.raises(ValueError, match=r"unknown config.model.architecture 'rnn'; expected one "
                     r"of \['encoder_decoder', 'shared', 'prefix_lm', 'causal'\]"):
    validate(config)
  with pytest.raises(ValueError, match="unknown config.model.architecture 'rnn'"):
    config_lib.data_spec(config)


def test_decoder_only_presets_have_one_stack_of_layers():
  encdec = config_lib.model_config(config_lib.derive(t5.get_config("size=base")))
  dec = config_lib.model_config(config_lib.derive(t5.get_config("arch=causal,size=base")))
  assert dec.num_encoder_layers == 0 and dec.num_decoder_layers == encdec.num_encoder_layers
  xl = config_lib.derive(t5.get_config("arch=prefix_lm,size=xl"))
  model = config_lib.model_config(xl)
  assert config_lib.preset_name(xl) == "t5_1_1/xl/prefix_lm"
  assert model.num_encoder_layers == 0 and model.num_decoder_layers == 24
  assert model.emb_dim == 2048


def test_old_config_json_is_migrated(tmp_path):
  """A config.json written before config.model.architecture (model.preset, mask_type, ...,
  data.architecture) loads as today's config, with the same model and data spec."""
  config = config_lib.derive(t5.get_config("arch=causal,family=t5_1_0,objective=full_lm,runlocal"))
  old = config.to_dict()
  model = config_lib.model_config(config)
  for name in ("family", "size", "architecture", "num_layers"):
    del old["model"][name]
  old["model"].update(preset="tiny_causal", mask_type="causal", shared_encoder_decoder=False,
                      num_encoder_layers=0, num_decoder_layers=2)
  old["data"]["architecture"] = "causal"
  path = tmp_path / "config.json"
  path.write_text(json.dumps(old))
  loaded = config_lib.load_config_json(str(path))
  assert (loaded.model.family, loaded.model.size, loaded.model.architecture,
          loaded.model.num_layers) == ("cpu", "tiny", "causal", 2)
  assert config_lib.model_config(loaded) == model
  assert config_lib.data_spec(loaded).fingerprint() == config_lib.data_spec(config).fingerprint()
  old["data"]["architecture"] = "encoder_decoder"
  path.write_text(json.dumps(old))
  with pytest.raises(ValueError, match="data.architecture='encoder_decoder' does not fit"):
    config_lib.load_config_json(str(path))
  old["data"]["architecture"] = "encoder_decoder"
  old["model"].update(preset="t5_1_0_base_shared", mask_type="encoder_decoder",
                      shared_encoder_decoder=True, num_encoder_layers=2, num_decoder_layers=2)
  path.write_text(json.dumps(old))
  shared = config_lib.load_config_json(str(path))
  assert (shared.model.family, shared.model.size, shared.model.architecture) == (
      "t5_1_0", "base", "shared")
  old["model"]["num_encoder_layers"] = 3
  path.write_text(json.dumps(old))
  with pytest.raises(ValueError, match="num_encoder_layers=3 != num_decoder_layers=2 in a "
                                       "shared encoder-decoder"):
    config_lib.load_config_json(str(path))
  # Unshared stacks of different depths keep them (model.encoder_num_layers).
  old["model"].update(preset="t5_1_0_base", shared_encoder_decoder=False)
  path.write_text(json.dumps(old))
  unequal = config_lib.load_config_json(str(path))
  assert (unequal.model.architecture, unequal.model.num_layers,
          unequal.model.encoder_num_layers) == ("encoder_decoder", 2, 3)
  got = config_lib.model_config(unequal)
  assert (got.num_encoder_layers, got.num_decoder_layers) == (3, 2)


def test_t5_defaults_match_the_notes():
  c = config_lib.derive(t5.get_config())
  assert (c.optim.name, c.schedule.name, c.schedule.base_lr, c.schedule.warmup_steps) == (
      "adafactor", "rsqrt", 1.0, 10_000)
  a = c.optim.adafactor
  assert (a.decay_rate, a.clipping_threshold, a.momentum, a.eps, a.min_dim_size_to_factor,
          a.multiply_by_parameter_scale, a.factored) == (0.8, 1.0, 0.0, 1e-30, 128, True, True)
  assert (c.loss.z_loss, c.loss.label_smoothing) == (1e-4, 0.0)
  assert (c.data.batch_size, c.data.inputs_length, c.train.num_steps) == (128, 512, 2 ** 19)
  assert c.model.vocab_size == 32128 and tuple(c.mesh.shape) == (-1, 1, 1)


def test_config_is_locked_and_typed():
  c = config_lib.derive(t5.get_config("runlocal"))
  with pytest.raises(AttributeError, match="lr"):
    c.optim.lr = 1e-3
  with pytest.raises(AttributeError, match="emb_dimm"):
    c.model.emb_dimm = 8
  with pytest.raises(TypeError):
    c.data.batch_size = "large"
  c.data.tokenizer = "/tmp/spm.model"  # typed placeholder accepts a str
  with pytest.raises(ValueError, match="unknown objective 'spam'"):
    config_lib.derive(t5.get_config("objective=spam"))
  with pytest.raises(ValueError, match="unknown arch 'rnn'"):
    config_lib.derive(t5.get_config("arch=rnn"))
  with pytest.raises(ValueError, match="unknown size 'huge'"):
    config_lib.derive(t5.get_config("size=huge"))


def _broken(**changes):
  c = config_lib.derive(t5.get_config("runlocal"))
  for path, value in changes.items():
    node = c
    *parents, leaf = path.split("__")
    for p in parents:
      node = node[p]
    with c.unlocked():
      node[leaf] = value
  return c


@pytest.mark.parametrize("changes, message", [
    (dict(data__objective="spam"), "unknown config.data.objective 'spam'"),
    (dict(data__targets_length=5), "needs targets_length >= 14"),
    (dict(data__inputs_length=0), "config.data.inputs_length must be positive"),
    (dict(data__batch_size=-4), "config.data.batch_size must be positive"),
    (dict(mesh__shape=(-1, -1, 1)), "config.mesh.shape: .*at most one may be -1"),
    (dict(mesh__shape=(3, 1, 1)), "does not fit 8 devices|has 3 devices but 8"),
    (dict(mesh__shape=(8, 1)), "needs 3 sizes"),
    (dict(model__architecture="rnn"), "unknown config.model.architecture 'rnn'"),
    (dict(model__vocab_size=2000), "set config.model.vocab_size=1152"),
    (dict(model__mlp_activation="tanh"), "config.model: TransformerConfig: unknown mlp_activation"),
    (dict(optim__name="sgd"), "unknown optim.name 'sgd'"),
    (dict(schedule__name="cosine"), "decay_steps"),
    (dict(loss__normalization="mean"), "unknown config.loss.normalization 'mean'"),
    (dict(optim__grad_accum_steps=3), "not divisible by config.optim.grad_accum_steps=3"),
    (dict(data__batch_size=12), "not divisible by the 8 batch shards"),
    (dict(wandb__mode="on"), "unknown config.wandb.mode 'on'"),
    (dict(logical_axis_rules=(("embed", "model"),)), "unknown mesh axis 'model'"),
    (dict(train__num_steps=0), "config.train.num_steps must be > 0"),
    (dict(ckpt__keep_steps=(250, 0)), r"config.ckpt.keep_steps must be positive steps, e.g. "
     r"\(250, 500\), got \(250, 0\)"),
    (dict(loss__tiled_chunk_tokens=64, model__final_logit_softcapping=30.0),
     r"tiled_chunk_tokens > 0 cannot cap logits \(config.model.final_logit_softcapping\)"),
    (dict(model__num_kv_heads=3), "config.model: TransformerConfig: num_kv_heads must be a "
     "positive int that divides num_heads"),
    # Row j: negative learning rate, negative prefetch, mesh axes that do not divide dims.
    (dict(schedule__base_lr=-1.0), "schedule.base_lr must be > 0, got -1.0"),
    (dict(optim__name="adamw", schedule__base_lr=0.0), "schedule.base_lr must be > 0"),
    (dict(optim__adafactor__momentum=1.5), r"optim.adafactor.momentum must be in \[0.0, 1.0\)"),
    (dict(optim__name="adamw", optim__adamw__b2=1.0), "optim.adamw.b2 must be in"),
    (dict(optim__name="adamw", optim__adamw__weight_decay=-0.1), "optim.adamw.weight_decay"),
    (dict(data__prefetch_batches=-1), "config.data.prefetch_batches must be >= 0"),
    (dict(data__max_bad_fraction=2.0), "config.data.max_bad_fraction must be in"),
    # Issue 33 row 10: a decode policy the sources do not know, or one with no file to apply to.
    (dict(data__on_decode_error="ignore"), "config.data.on_decode_error must be 'replace' or "
     "'skip'.*got 'ignore'"),
    (dict(data__on_decode_error="skip"), "config.data.on_decode_error='skip' applies to data "
     "files, and config.data.format='default'"),
    (dict(mesh__shape=(1, 1, 8), model__num_heads=6),
     r"config.model.num_heads=6 is not divisible by the 8 devices of mesh axis tensor"),
    # Grouped-query attention's key/value heads sharded over tensor by a rule override.
    (dict(mesh__shape=(2, 1, 4), model__num_kv_heads=2,
          logical_axis_rules=(("kv_heads", "tensor"),) + partitioning.DEFAULT_LOGICAL_AXIS_RULES),
     r"config.model.num_kv_heads=2 is not divisible by the 4 devices of mesh axis tensor"),
    (dict(mesh__shape=(1, 1, 8), model__mlp_dim=100),
     r"config.model.mlp_dim=100 is not divisible by the 8 devices of mesh axis tensor"),
    (dict(mesh__shape=(1, 8, 1), model__emb_dim=60),
     r"config.model.emb_dim=60 is not divisible by the 8 devices of mesh axis fsdp"),
])
def test_validate_errors_say_what_to_change(changes, message):
  with pytest.raises(ValueError, match=message):
    validate(_broken(**changes), num_devices=8)


def test_mesh_divisibility_follows_the_rules_and_runs_before_config_json(tmp_path):
  """Row j: the vocabulary over tensor; unsharded dims need not divide; and
  train_and_evaluate refuses before writing config.json."""
  c = _broken(mesh__shape=(1, 1, 8), model__vocab_size=1100)
  with pytest.raises(ValueError, match=r"config.model.vocab_size=1100 is not divisible by the 8 "
                     r"devices of mesh axis tensor"):
    validate(c, num_devices=8)
  # Pure data parallelism shards no param dim: 6 heads are fine on 8 devices.
  validate(_broken(mesh__shape=(8, 1, 1), model__num_heads=6), num_devices=8)
  # Rules that leave heads unsharded make the same config valid on a tensor axis of 8
  # (the vocab and mlp dims still divide).
  rules = [["batch", ["data", "fsdp"]], ["vocab", "tensor"], ["mlp", "tensor"],
           ["heads", None], ["joined_kv", None], ["embed", "fsdp"], ["kv", None]]
  validate(_broken(mesh__shape=(1, 1, 8), model__num_heads=6, logical_axis_rules=rules),
                  num_devices=8)
  from lm import train
  workdir = tmp_path / "run"
  with pytest.raises(ValueError, match="num_heads=6 is not divisible"):
    settings = validate(_broken(mesh__shape=(1, 1, 8), model__num_heads=6))  # no device count
    train.train_and_evaluate(settings, str(workdir))
  assert not (workdir / "config.json").exists()


def test_device_errors_are_validates_checks_on_the_typed_settings():
  """build_run's check (lm.validate.device_errors on RunSettings) says what validate says
  with the device count; settings validated without one fit or not by the devices given."""
  from lm import validate as validate_lib
  broken = _broken(mesh__shape=(1, 1, 8), model__num_heads=6)
  settings = validate(broken)  # no device count: nothing to check against
  with pytest.raises(ValueError) as e:
    validate(broken, num_devices=8)
  assert validate_lib.device_errors(settings, 8) == str(e.value).split("\n  - ")[1:]
  assert "num_heads=6 is not divisible" in validate_lib.device_errors(settings, 8)[0]
  assert validate_lib.device_errors(settings, 4)[0].startswith("config.mesh.shape: mesh shape")
  fine = validate(_broken(mesh__shape=(-1, 1, 1)))
  assert validate_lib.device_errors(fine, 8) == [] == validate_lib.device_errors(fine, 1)
  assert "12 rows per microbatch is not divisible by the 8 batch shards" in (
      validate_lib.device_errors(validate(_broken(data__batch_size=12, data__num_shards=4)),
                                 8)[0])


def test_validate_collects_several_errors_and_mesh_syntax_without_devices():
  c = _broken(data__objective="spam", loss__z_loss=-1.0)
  with pytest.raises(ValueError) as e:
    validate(c)
  assert "objective 'spam'" in str(e.value) and "z_loss must be >= 0" in str(e.value)
  validate(_broken(mesh__shape=(3, 1, 1)))  # fine until the device count is known


def test_step_kwargs_match_step_signatures():
  import inspect
  from lm import steps
  c = config_lib.derive(t5.get_config("runlocal"))
  for fn, kwargs in ((steps.train_step, config_lib.train_step_kwargs(c)),
                     (steps.eval_step, config_lib.eval_step_kwargs(c))):
    params = inspect.signature(fn).parameters
    assert set(kwargs) <= set(params)
  assert config_lib.train_step_kwargs(c)["z_loss"] == 1e-4


@pytest.mark.parametrize("noise,derived,gin", [(0.10, 139, 103), (0.15, 188, 192),
                                               (0.25, 272, 256), (0.50, 422, 512)])
def test_table6_targets_lengths_derived_or_gin(noise, derived, gin):
  # T5's iid_{10,15,25,50}_u_u gins: 512/103, 512/192, 512/256, 512/512.
  arg = f"family=t5_1_0,objective=iid_replace_spans,noise={noise}"
  config = config_lib.derive(t5.get_config(arg))
  assert config.data.targets_length == derived and not config.data.allow_truncated_targets
  config = config_lib.derive(t5.get_config(arg + ",lengths=gin"))
  assert config.data.targets_length == gin and config.data.allow_truncated_targets
  validate(config)  # the truncation is the explicit choice: accepted
  config.data.allow_truncated_targets = False
  if gin < derived:
    with pytest.raises(ValueError, match=f"needs targets_length >= {derived}"):
      validate(config)


def test_gin_lengths_of_other_objectives():
  assert _t5("objective=drop_tokens,lengths=gin").data.targets_length == 104
  assert config_lib.derive(t5.get_config("objective=bert,lengths=gin")).data.targets_length == 512
  assert (_t5("objective=span_corruption,lengths=gin").data.targets_length
          == _t5("objective=span_corruption").data.targets_length == 114)
  with pytest.raises(ValueError, match="no gin for objective 'iid_replace_spans' at noise 0.3"):
    config_lib.derive(t5.get_config("objective=iid_replace_spans,noise=0.3,lengths=gin"))
  with pytest.raises(ValueError, match="unknown lengths 'bogus'"):
    config_lib.derive(t5.get_config("lengths=bogus"))


def test_loss_on_inputs_only_on_the_causal_architecture():
  config = _t5("arch=causal,objective=iid_replace_spans,loss_on_inputs=True")
  assert config.data.loss_on_inputs
  validate(config)
  for arch, field in (("prefix_lm", "loss_on_inputs=True with config.model.architecture="
                                    "'prefix_lm'"),
                      ("encoder_decoder", "loss_on_inputs=True needs a decoder-only")):
    config = _t5(f"arch={arch},objective=iid_replace_spans,loss_on_inputs=True")
    with pytest.raises(ValueError, match=field):
      validate(config)


def test_the_eval_batch_size_is_its_own_field_else_the_batch_size():
  config = _t5("runlocal")
  assert config.data.eval_batch_size is None
  assert config_lib.eval_batch_size(config) == config.data.batch_size == 16
  assert config_lib.data_spec(config).global_eval_batch_size == 16
  config.data.eval_batch_size = 32
  assert config_lib.eval_batch_size(config) == 32
  assert config_lib.data_spec(config).global_eval_batch_size == 32
  from lm.downstream import finetune_data  # pylint: disable=g-import-not-at-top
  spec = finetune_data.FinetuneSpec(tasks=(("t", 1.0),), batch_size=8, num_shards=4)
  assert spec.global_eval_batch_size == 8
  assert dataclasses.replace(spec, eval_batch_size=4).global_eval_batch_size == 4


def test_an_encoder_depth_on_a_decoder_only_architecture_is_refused():
  for arch in ("causal", "prefix_lm"):
    config = _t5(f"arch={arch}")
    assert config_lib.model_config(config).num_encoder_layers == 0
    validate(config)
    config.model.encoder_num_layers = 3   # model_config alone would drop it silently
    with pytest.raises(ValueError, match=f"encoder_num_layers=3 sets an encoder's depth, and "
                                         f"config.model.architecture='{arch}' has no encoder"):
      validate(config)
  config = _t5("arch=encoder_decoder")
  config.model.encoder_num_layers = 3
  assert validate(config).model.num_encoder_layers == 3


def test_full_lm_decoder_only_rows_are_the_targets_length():
  # T5 lm.gin: 128 x 512 tokens; the decoder-only row holds no inputs part.
  config = config_lib.derive(t5.get_config("arch=causal,family=t5_1_0,objective=full_lm"))
  assert (config.data.inputs_length, config.data.targets_length) == (0, 512)
  validate(config)
  config = config_lib.derive(t5.get_config("arch=encoder_decoder,objective=full_lm"))
  assert (config.data.inputs_length, config.data.targets_length) == (512, 512)
  config = config_lib.derive(t5.get_config("arch=causal,objective=iid_replace_spans"))
  config.data.inputs_length = 0
  with pytest.raises(ValueError, match="inputs_length must be positive, got 0"):
    validate(config)


def test_ul2_mode_tokens_switch():
  assert "mode_tokens" not in _t5("objective=ul2").data.objective_params
  config = config_lib.derive(t5.get_config("objective=ul2,mode_tokens=text"))
  assert config.data.objective_params.mode_tokens == "text"
  validate(config)
  with pytest.raises(ValueError, match="mode_tokens applies to objective=ul2 only"):
    config_lib.derive(t5.get_config("objective=span_corruption,mode_tokens=text"))


def test_a_run_configs_unset_model_fields_take_their_own_type_from_overrides():
  """lm.config.apply_overrides (lm.evaluate, lm.decode, launch: overrides on a run's
  config.json, where unset fields are plain None) types an unset model field as lm.main's
  placeholders do: `rope_local_max_wavelength=100` is the float 100.0, not the int 100."""
  import dataclasses
  import typing

  from lm.model.transformer_config import TransformerConfig
  run = config_lib.ml_collections.ConfigDict(t5.get_config("runlocal").to_dict())
  hints = typing.get_type_hints(TransformerConfig)
  samples = {bool: ("true", True), int: ("7", 7), float: ("100", 100.0), str: ("ab", "ab")}
  unset = [f.name for f in dataclasses.fields(TransformerConfig)
           if f.name in run.model and run.model[f.name] is None]
  assert {"eoi_id", "rope_local_max_wavelength", "num_kv_heads"} <= set(unset)
  for name in unset + ["encoder_num_layers"]:
    kind = int if name == "encoder_num_layers" else next(
        t for t in typing.get_args(hints[name]) or (hints[name],) if t is not type(None))
    text, want = samples[kind]
    got = config_lib.apply_overrides(run, [f"--config.model.{name}={text}"]).model[name]
    assert got == want and type(got) is kind, (name, got)
    assert config_lib.apply_overrides(run, [f"--config.model.{name}=None"]).model[name] is None
  with pytest.raises(ValueError, match="eoi_id='five': expected an int"):
    config_lib.apply_overrides(run, ["--config.model.eoi_id=five"])
  # A field set in the run keeps its own type, as before.
  assert config_lib.apply_overrides(run, ["--config.model.num_heads=4"]).model.num_heads == 4


def test_every_unset_model_field_takes_its_own_type_from_the_command_line():
  """config.model's None fields are placeholders of the TransformerConfig field's type, so
  that lm.main's `--config.model.eoi_id=5` (absl parses by the placeholder) is the int 5: a
  str placeholder gave '5', which the model refuses."""
  import dataclasses
  import typing

  from lm.model.transformer_config import TransformerConfig
  model = t5.get_config("runlocal").model
  hints = typing.get_type_hints(TransformerConfig)
  unset = [f.name for f in dataclasses.fields(TransformerConfig)
           if f.name in model and model[f.name] is None]
  assert {"eoi_id", "rope_local_max_wavelength", "num_kv_heads", "layer_pattern"} <= set(unset)
  for name in unset:
    want = next(t for t in typing.get_args(hints[name]) or (hints[name],) if t is not type(None))
    assert model.get_type(name) is want, name
  model.eoi_id, model.rope_local_max_wavelength = 5, 100.0
  with pytest.raises(TypeError):
    model.eoi_id = "5"
