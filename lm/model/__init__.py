"""The lm Transformer family (T5.1.1 defaults): config, model, masks, presets, accounting.

  from lm.model import Transformer, TransformerConfig, make_config, count_params
"""
from lm.model.accounting import count_params, flops_per_token, forward_flops, param_breakdown, training_flops
from lm.model.presets import FAMILIES, make_config
from lm.model.transformer import (Transformer, TransformerConfig, scan_to_unscanned,
                                  unscanned_to_scan)

__all__ = ["Transformer", "TransformerConfig", "FAMILIES", "make_config", "count_params",
           "param_breakdown", "forward_flops", "training_flops", "flops_per_token",
           "scan_to_unscanned", "unscanned_to_scan"]
