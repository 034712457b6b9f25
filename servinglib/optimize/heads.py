"""Attention-head pruning: whole heads removed from BERT-style self-attention, in place.

A BERT-style attention module (BERT, RoBERTa, MiniLM, ELECTRA... as ``transformers``
builds them) has ``query``, ``key`` and ``value`` linear layers of ``num_attention_heads x
attention_head_size`` outputs, and its parent's ``output.dense`` layer reads them back. A
head is a slice of ``attention_head_size`` rows of each projection and as many input columns
of the output layer; dropping a head removes those four slices, so the dense result is
smaller (fewer parameters, fewer MACs in every attention product) and the hidden size, the
feed-forward layers and the embeddings are left whole.

Importance of a head is ``magnitude`` (L2 norm of its four slices) or ``taylor``
(|weight x gradient| summed over them, the gradient left on the weights by the caller).

Example::

    removed = prune_heads(model, 0.5)   # half of the heads of every attention layer
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from servinglib.optimize._deps import require
from servinglib.optimize.errors import OptimizeError

__all__ = ["AttentionBlock", "attention_blocks", "prune_heads"]


@dataclass(frozen=True)
class AttentionBlock:
    """One self-attention module and the output layer that reads its heads back."""

    name: str
    attention: Any
    output: Any

    @property
    def heads(self) -> int:
        """The module's current number of heads."""
        return int(self.attention.num_attention_heads)

    @property
    def head_size(self) -> int:
        """Rows of each projection per head."""
        return int(self.attention.attention_head_size)


def attention_blocks(module: Any) -> list[AttentionBlock]:
    """Every BERT-style attention block of ``module`` (``query``/``key``/``value`` + output).

    Raises:
        OptimizeError: none found.
    """
    torch = require("torch", "pruning attention heads")
    named = dict(module.named_modules())
    blocks = []
    for name, child in named.items():
        projections = [getattr(child, p, None) for p in ("query", "key", "value")]
        if not all(isinstance(p, torch.nn.Linear) for p in projections):
            continue
        if not isinstance(getattr(child, "num_attention_heads", None), int):
            continue
        parent = named.get(name.rpartition(".")[0])
        dense = getattr(getattr(parent, "output", None), "dense", None)
        if not isinstance(dense, torch.nn.Linear) or dense.in_features != child.query.out_features:
            continue
        blocks.append(AttentionBlock(name, child, dense))
    if not blocks:
        raise OptimizeError(
            f"{type(module).__name__} has no BERT-style attention (a module with query, key "
            "and value Linear layers and num_attention_heads, whose parent's output.dense "
            "reads them): prune its channels instead (--structure channels)"
        )
    return blocks


def _scores(block: AttentionBlock, importance: str) -> Any:
    """One importance per head: the sum over its q/k/v rows and output columns."""
    torch = require("torch", "pruning attention heads")
    a, size = block.attention, block.head_size
    total = torch.zeros(block.heads)
    for layer, axis in ((a.query, 0), (a.key, 0), (a.value, 0), (block.output, 1)):
        weight = layer.weight.detach()
        if importance == "taylor":
            if layer.weight.grad is None:
                raise OptimizeError("taylor importance: no gradient on the attention weights")
            weight = (weight * layer.weight.grad).abs()
        else:
            weight = weight.pow(2)
        rows = weight if axis == 0 else weight.t()
        total += rows.reshape(block.heads, size, -1).sum(dim=(1, 2))
    return total


def _slice(layer: Any, keep: Any, axis: int) -> None:
    torch = require("torch", "pruning attention heads")
    with torch.no_grad():
        layer.weight = torch.nn.Parameter(layer.weight.index_select(axis, keep).clone())
        if axis == 0 and layer.bias is not None:
            layer.bias = torch.nn.Parameter(layer.bias.index_select(0, keep).clone())
    if axis == 0:
        layer.out_features = len(keep)
    else:
        layer.in_features = len(keep)


def prune_heads(module: Any, share: float, *, importance: str = "magnitude") -> int:
    """Remove ``share`` of the current heads of each attention block, rounded (one always stays).

    Returns the number of heads removed in all.
    """
    torch = require("torch", "pruning attention heads")
    removed = 0
    for block in attention_blocks(module):
        heads, size = block.heads, block.head_size
        drop = min(round(heads * share), heads - 1)
        if drop <= 0:
            continue
        order = torch.argsort(_scores(block, importance), descending=True)
        kept = torch.sort(order[: heads - drop]).values
        rows = (kept[:, None] * size + torch.arange(size)[None, :]).reshape(-1)
        a = block.attention
        for layer in (a.query, a.key, a.value):
            _slice(layer, rows, 0)
        _slice(block.output, rows, 1)
        a.num_attention_heads = heads - drop
        a.all_head_size = (heads - drop) * size
        removed += drop
    return removed
